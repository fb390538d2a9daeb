"""Request handlers: one module per API family, each `async def handle(ctx, header, body)`.

A handler returns the response as a dict of spec field names (encoded by the codec), raw
response bytes (hot paths with their own encoder), or None when no response is sent
(Produce with acks=0).
"""
