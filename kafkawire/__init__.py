"""The Kafka wire protocol, sans-io: request framing, the request/response codec over kio's
generated message types, the hand-written encoders and decoders of the hot paths (Produce,
Fetch, Metadata) and the table of supported APIs. The server (`gateway`) and the client
(`kafkaclient`) both build on it; it imports no other package of the project but `hotpath`
(which decides, before the compiled modules load, whether they come from their sources)."""

from hotpath import install_pure_hook

install_pure_hook()  # before any compiled module of this package is imported
