"""The server side of TLS: an SSLContext from PEM files, and the mutual-TLS principal."""

from __future__ import annotations

import ssl

from cryptography import x509

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def server_context(
    certfile: str, keyfile: str | None, cafile: str | None, client_auth: str
) -> ssl.SSLContext:
    """TLS 1.2+ with the certificate chain and key of `certfile`/`keyfile` (PEM).

    `cafile` holds the CAs client certificates must chain to; needed unless client_auth
    is "none".
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ssl client auth must be one of {', '.join(CLIENT_AUTH)}")
    if client_auth != "none":
        if not cafile:
            raise ValueError(f"--ssl-client-auth {client_auth} needs --ssl-cafile")
        context.load_verify_locations(cafile)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def principal_from_certificate(der: bytes) -> str:
    """Kafka's default mTLS principal: "User:" + the subject DN in RFC 2253 form, most
    specific part first (CN=alice,OU=eng,O=acme,C=US), as Java's X500Principal prints it."""
    subject = x509.load_der_x509_certificate(der).subject
    return "User:" + subject.rfc4514_string()
