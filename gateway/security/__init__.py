"""Listeners, TLS and SASL: who is on the other end of a Kafka connection.

`listeners` parses Kafka-style listener lists, `tls` builds the server SSL context and the
mutual-TLS principal, `sasl` runs SaslHandshake/SaslAuthenticate (PLAIN, SCRAM-SHA-256/512)
before a connection may send anything else. The result is the PRINCIPAL context variable of
gateway/handlers/context.py, which the authorizer reads.
"""
