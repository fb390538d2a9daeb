"""Request handlers: one module per API family, each `handle(ctx, header, body)`.

The server calls a handler in request order, then awaits what it returned in a task of its
own. Most handlers are `async def` (all their work runs in that task); Produce is a plain
function that queues its appends before returning, so pipelined produces keep their order.

A handler returns the response as a dict of spec field names (encoded by the codec), raw
response bytes (hot paths with their own encoder), or None when no response is sent
(Produce with acks=0).
"""
