"""The Kafka wire protocol, sans-io: request framing, the request/response codec over kio's
generated message types, the hand-written encoders and decoders of the hot paths (Produce,
Fetch, Metadata) and the table of supported APIs. The server (`gateway`) and the client
(`kafkaclient`) both build on it; it imports no other package of the project."""
