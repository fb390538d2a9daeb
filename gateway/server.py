"""The trio TCP server: one task per connection, pipelined requests answered in order.

Per connection, a reader task splits frames and starts each request's handler; a writer
task sends the responses strictly in request order (and runs the handlers' waiting parts,
a long-poll Fetch's wait, where no request changes the connection's context). A response
known at once while nothing else is in flight is sent by the reader itself. The number of
requests in flight per connection is bounded, so a client that never reads its responses
stops being read from.

Requests of one connection take effect in the order they were sent, as on Kafka: a request
starts only once every earlier one has settled (its effects visible to later requests), with
one exception. A Produce that follows only Produces starts at once: its appends are queued in
request order synchronously, so it shares the earlier ones' group commit, and it settles
after them (one log's commits finish in order; the writer settles responses in order).
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from core.errors import ErrorCode
from gateway.authorization.guard import guarded, test_principal_enabled
from gateway.handlers import (
    acls,
    admin,
    cluster,
    configs,
    consumer_groups,
    data,
    groups,
    offsets,
    quotas,
    records,
    replicas,
    share,
    share_admin,
    topic_partitions,
    txn,
)
from gateway.handlers import security as security_handlers
from gateway.handlers.context import CLIENT_HOST, LISTENER, PRINCIPAL, GatewayContext
from gateway.handlers.data import Answered, ProduceOutcome
from gateway.lean_stream import LeanSocketStream
from gateway.limits.connections import ConnectionLimit
from gateway.limits.quota import MUTE, Mute, with_quotas
from gateway.security.listeners import ListenerSetup
from gateway.security.ratelimit import RateLimitedLog
from gateway.security.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    AuthenticationFailed,
    SaslSession,
    SaslStateError,
    State,
)
from gateway.security.tls import principal_from_certificate
from kafkawire.apis import SUPPORTED_APIS, ApiKey
from kafkawire.codec import (
    ProtocolError,
    RequestHeader,
    decode_body,
    decode_header,
    encode_response,
)
from kafkawire.fetch_request import decode_fetch_request
from kafkawire.framing import FrameDecoder, FrameError
from kafkawire.produce_request import decode_produce_request
from kafkawire.produce_response import encode_produce_response

log = logging.getLogger(__name__)
# Lines any client can cause (bad frames, failed logins, TLS garbage): rate limited.
_client_faults = RateLimitedLog(log)

Handler = Callable[
    [GatewayContext, RequestHeader, Any],
    Awaitable[dict[str, Any] | bytes | list[bytes | memoryview] | None],
]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: data.produce,
    ApiKey.FETCH: data.fetch,
    ApiKey.LIST_OFFSETS: data.list_offsets,
    ApiKey.METADATA: admin.metadata,
    ApiKey.OFFSET_COMMIT: offsets.offset_commit,
    ApiKey.OFFSET_FETCH: offsets.offset_fetch,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.LIST_GROUPS: share_admin.list_groups,  # classic groups, then share groups
    ApiKey.DELETE_GROUPS: share_admin.delete_groups,  # share groups, then classic
    ApiKey.OFFSET_DELETE: offsets.offset_delete,
    ApiKey.API_VERSIONS: admin.api_versions,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.DELETE_TOPICS: admin.delete_topics,
    ApiKey.DELETE_RECORDS: records.delete_records,
    ApiKey.INIT_PRODUCER_ID: admin.init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.CREATE_PARTITIONS: cluster.create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: cluster.describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: topic_partitions.describe_topic_partitions,
    ApiKey.ALTER_REPLICA_LOG_DIRS: replicas.alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: replicas.describe_log_dirs,
    ApiKey.ELECT_LEADERS: replicas.elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: replicas.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: replicas.list_partition_reassignments,
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
    ApiKey.END_TXN: txn.end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn.txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: txn.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: txn.list_transactions,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: quotas.alter_client_quotas,
    ApiKey.SASL_HANDSHAKE: security_handlers.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: security_handlers.sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: security_handlers.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: security_handlers.alter_user_scram_credentials,
    ApiKey.SHARE_GROUP_HEARTBEAT: share.share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: share.share_group_describe,
    ApiKey.SHARE_FETCH: share.share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share.share_acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_admin.describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_admin.alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_admin.delete_share_group_offsets,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.consumer_group_describe,
}
assert set(HANDLERS) == set(SUPPORTED_APIS), "every advertised API needs a handler"

_SIZE = struct.Struct(">i")
_RECEIVE_BYTES = 256 * 1024
# Kafka's sasl.server.max.receive.size: the largest frame before authentication.
_UNAUTHENTICATED_MAX_FRAME = 512 * 1024
# Kafka's request APIs allowed before a SASL exchange completes.
_BEFORE_AUTH = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
_COALESCE_MAX = 64  # responses joined into one send at most
_COALESCE_BYTES = 256 * 1024
_PRODUCE_KEY = ApiKey.PRODUCE.to_bytes(2, "big")


# The most frequent requests, decoded by hand (kio's reflective reader is the slow part).
_HAND_DECODERS: dict[int, Callable[[bytes, int, int], Any]] = {
    ApiKey.PRODUCE: decode_produce_request,
    ApiKey.FETCH: decode_fetch_request,
}


@dataclass(slots=True)
class ServerSettings:
    max_request_bytes: int = 100 * 1024 * 1024
    max_in_flight_per_connection: int = 128
    # Kafka's connections.max.idle.ms: a connection with no request in flight that sends
    # no complete request for this long (nothing, or half a frame) is closed.
    connections_max_idle_ms: int = 600_000
    # Kafka's max.connections.per.ip (0: no limit, Kafka's default is effectively none).
    max_connections_per_ip: int = 0
    # How long a TLS handshake may take before the connection is dropped.
    tls_handshake_timeout_s: float = 10.0


class _ResponseSlot:
    """A place in a connection's response order, filled when its handler finishes."""

    __slots__ = ("done", "_waiter", "payload", "close_connection", "pending")

    def __init__(self) -> None:
        self.done = False
        # Made only when the writer has to wait: most slots are done before it looks.
        self._waiter: trio.Event | None = None
        self.payload: Framed | None = None
        self.close_connection = False
        # A handler's result left for the writer task to finish (no task of its own): a
        # Produce's outcome, or the waiting part of a request; `done` is set.
        self.pending: tuple[RequestHeader, Awaitable[Any]] | None = None

    def set_done(self) -> None:
        self.done = True
        if self._waiter is not None:
            self._waiter.set()

    async def wait_done(self) -> None:
        if not self.done:  # (waiting on a set event would still yield)
            self._waiter = trio.Event()
            await self._waiter.wait()

    def fill(self, payload: Framed | None, close_connection: bool = False) -> None:
        self.payload = payload
        self.close_connection = close_connection
        self.set_done()


class _CloseConnection(Exception):
    pass


class _Sequencer:
    """A connection's requests that have started and not yet settled.

    Settled means the response is final: the handler returned, or the Produce's appends are
    durable (high watermarks advanced). The writer settles slots in request order, so once
    the count is back to zero every earlier request's effects are visible."""

    __slots__ = ("unsettled", "produces_only", "_drained")

    def __init__(self) -> None:
        self.unsettled = 0
        self.produces_only = True  # every unsettled request is a Produce
        self._drained: trio.Event | None = None

    def may_start(self, produce: bool) -> bool:
        """Whether a request may start now, without waiting for earlier ones."""
        return self.unsettled == 0 or (produce and self.produces_only)

    def started(self, produce: bool) -> None:
        if self.unsettled == 0:
            self.produces_only = True
        self.unsettled += 1
        self.produces_only = self.produces_only and produce

    def settled(self) -> None:
        self.unsettled -= 1
        if self.unsettled == 0 and self._drained is not None:
            self._drained.set()
            self._drained = None

    async def drained(self) -> None:
        """Wait until every started request has settled."""
        while self.unsettled:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()


class _IdleTimer:
    """The connection's idle deadline: pushed back by every complete request, suspended
    while requests are in flight (a long poll is not idleness), restarted after the last
    response went out.

    A watchdog task enforces it, so a request costs two counter updates, not two moves of
    a cancel scope's deadline (each reorders trio's deadline heap: a few per cent of the
    loop's time at a small request per round trip)."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = idle_ms / 1000
        self.in_flight = 0
        self.quiet_since = trio.current_time()
        self.scope = trio.CancelScope()

    def request_started(self) -> None:
        self.in_flight += 1

    def response_sent(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.quiet_since = trio.current_time()

    async def watch(self) -> None:
        """Cancel `scope` once nothing has been in flight for the idle time."""
        while True:
            now = trio.current_time()
            if self.in_flight:
                await trio.sleep_until(now + self.idle_s)
                continue
            due = self.quiet_since + self.idle_s
            if now >= due:
                self.scope.cancel()
                return
            await trio.sleep_until(due)


def _send_whole_now(stream: LeanSocketStream, slot: _ResponseSlot) -> bool:
    """Send a filled slot's answer from here, without waiting: True if the socket took it
    whole; otherwise the slot keeps it, or the part the socket did not take, for the
    writer to send."""
    payload = slot.payload
    if not isinstance(payload, bytes) or slot.close_connection:
        return False
    sent = stream.send_now(payload)
    if sent == len(payload):
        return True
    if sent:
        slot.payload = payload[sent:]
    return False


class _LoneProduce:
    """A Produce answered by the task that makes its appends durable, not by the writer.

    With nothing else in flight on a plain TCP connection (a producer that waits for each
    answer), the writer task would be woken twice per request: to take the slot, and again
    when the group commit ends. Instead the last append's completion (in the segment log's
    flusher) encodes the response and sends it with one non-blocking send. What cannot go
    that way (a partial send, a closed socket, a failed encoding) is handed to the writer,
    which then owns the slot; so is the whole request when the reader reads another one
    first (`to_writer`), so that responses keep their order."""

    __slots__ = (
        "slot",
        "header",
        "outcome",
        "remaining",
        "active",
        "_stream",
        "_order",
        "_idle",
        "_slots",
    )

    def __init__(
        self,
        stream: LeanSocketStream,
        header: RequestHeader,
        outcome: ProduceOutcome,
        slot: _ResponseSlot,
        order: _Sequencer,
        idle: _IdleTimer,
        slots: trio.MemorySendChannel[_ResponseSlot],
    ) -> None:
        self.slot = slot
        self.header = header
        self.outcome = outcome
        self.remaining = 0
        self.active = True
        self._stream = stream
        self._order = order
        self._idle = idle
        self._slots = slots

    def start(self) -> bool:
        """Ask each pending append to report its end; False: the writer must answer it."""
        count = self.outcome.notify_each_done(self._one_done)
        if count <= 0:  # known already, or some append cannot report (later calls ignored)
            self.active = False
            return False
        self.remaining = count
        return True

    def to_writer(self) -> None:
        """Another request was read: the writer answers this one (before that one)."""
        if self.active:
            self.active = False
            self._writer_awaits()

    def _one_done(self) -> None:
        # Runs inside the store's completion of a group commit: it must not raise.
        self.remaining -= 1
        if self.remaining or not self.active:
            return
        self.active = False
        slot = self.slot
        try:
            ready, response = self.outcome.result_now()
            if not ready:  # (all its appends ended, so not expected)
                self._writer_awaits()
                return
            slot.fill(Gateway._encode(self.header, response))
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            self._hand_over()
            return
        if slot.payload is None:  # acks=0: settled once durable, never answered
            self._settled()
            return
        try:
            whole = _send_whole_now(self._stream, slot)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            whole = False  # the writer meets the same error and ends the connection
        if whole:
            self._settled()
        else:
            self._hand_over()

    def _writer_awaits(self) -> None:
        self.slot.pending = (self.header, self.outcome)
        self.slot.set_done()
        self._hand_over()

    def _settled(self) -> None:
        self._order.settled()
        self._idle.response_sent()

    def _hand_over(self) -> None:
        # The window is empty (this was the only request in flight): nothing blocks, and a
        # closed channel means the connection has ended.
        ended = (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError)
        with contextlib.suppress(*ended):
            self._slots.send_nowait(self.slot)


class Gateway:
    def __init__(self, ctx: GatewayContext, settings: ServerSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        # ACL guards when an authorizer is configured; quotas on Produce/Fetch always.
        table = guarded(HANDLERS, test_principal_enabled()) if ctx.authorizer else HANDLERS
        self.handlers = with_quotas(table)
        self.connections = ConnectionLimit(settings.max_connections_per_ip)

    async def handle_connection(
        self, stream: trio.SocketStream, setup: ListenerSetup | None = None
    ) -> None:
        peer = _peer_name(stream)
        host = peer.rpartition(":")[0]
        CLIENT_HOST.set(host)
        if not self.connections.acquire(host):
            _client_faults.warning(
                "%s: refused: %d connections from this address already (--max-connections-per-ip)",
                peer,
                self.connections.per_ip,
            )
            await stream.aclose()
            return
        MUTE.set(Mute())
        sasl = None
        if setup is not None:
            LISTENER.set((setup.listener.name, setup.advertised_host, setup.advertised_port))
            if setup.listener.uses_sasl:
                sasl = SaslSession(setup.sasl_mechanisms, self.ctx.credentials)
        # One log line per connection problem; nothing escapes to the listener.
        try:
            if setup is not None and setup.ssl_context is not None:
                tls = await self._tls_handshake(stream, setup, peer)
                if tls is None:
                    return
                async with tls:
                    await self._serve(tls, sasl)
                return
            async with stream:
                lean = LeanSocketStream(stream)
                try:
                    await self._serve(lean, sasl)
                finally:
                    lean.close_duplicate()
        except* _CloseConnection as group:
            _client_faults.info("%s: closing connection: %s", peer, group.exceptions[0])
        except* (FrameError, ProtocolError) as group:
            _client_faults.warning("%s: closing connection: %s", peer, group.exceptions[0])
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as group:
            log.debug("%s: connection lost: %s", peer, group.exceptions[0])
        except* Exception:
            log.exception("%s: connection failed", peer)
        finally:
            self.connections.release(host)

    async def _tls_handshake(
        self, stream: trio.SocketStream, setup: ListenerSetup, peer: str
    ) -> trio.SSLStream[trio.SocketStream] | None:
        """The server side of a TLS handshake; None (connection closed) if it failed."""
        assert setup.ssl_context is not None
        tls = trio.SSLStream(stream, setup.ssl_context, server_side=True)
        failure: str | None = "timed out"
        with trio.move_on_after(self.settings.tls_handshake_timeout_s):
            try:
                await tls.do_handshake()
                failure = None
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                failure = str(exc.__cause__ or exc)
        if failure is not None:
            _client_faults.info("%s: TLS handshake failed, closing: %s", peer, failure)
            await trio.aclose_forcefully(stream)
            return None
        certificate = tls.getpeercert(binary_form=True)
        if certificate:
            try:
                PRINCIPAL.set(principal_from_certificate(certificate))
            except ValueError as exc:  # verified by OpenSSL, yet unreadable: refuse it
                _client_faults.info("%s: unusable client certificate: %s", peer, exc)
                await trio.aclose_forcefully(tls)
                return None
        return tls

    async def _serve(self, stream: trio.abc.Stream, sasl: SaslSession | None = None) -> None:
        decoder = FrameDecoder(
            _UNAUTHENTICATED_MAX_FRAME if sasl is not None else self.settings.max_request_bytes
        )
        send_slots, receive_slots = trio.open_memory_channel[_ResponseSlot](
            self.settings.max_in_flight_per_connection
        )
        idle = _IdleTimer(self.settings.connections_max_idle_ms)
        order = _Sequencer()
        # Whether the writer task may run a handler's waiting part: only where no request
        # changes the connection's context variables after the writer started (a SASL
        # login or the authorizer's test principal set PRINCIPAL in the reader's context).
        writer_finishes = sasl is None and self.ctx.authorizer is None
        lean = stream if isinstance(stream, LeanSocketStream) else None
        lone: _LoneProduce | None = None  # a lone Produce its appends' end will answer
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_responses, stream, receive_slots, idle, order)
            nursery.start_soon(idle.watch)
            async with send_slots:
                with idle.scope:
                    mute = MUTE.get()
                    while True:
                        if mute is not None:
                            await mute.wait()  # a client over its quota is not read from
                        data = await stream.receive_some(_RECEIVE_BYTES)
                        if not data:
                            nursery.cancel_scope.cancel()  # the client is gone: drop its work
                            return
                        decoder.feed(bytes(data))
                        while (frame := decoder.next_frame()) is not None:
                            if mute is not None:
                                await mute.wait()  # pipelined requests wait out a throttle
                            produce = frame[:2] == _PRODUCE_KEY
                            if not order.may_start(produce):
                                # Not read from meanwhile, as Kafka mutes a connection
                                # while it serves a request.
                                await order.drained()
                            order.started(produce)
                            slot = _ResponseSlot()
                            idle.request_started()
                            # Nothing else in flight: the writer is idle, so a response
                            # ready at once may go out from here, before any later one.
                            alone = lean is not None and idle.in_flight == 1
                            if not alone or (sasl is not None and not sasl.authenticated):
                                if lone is not None:  # its answer goes out before this one's
                                    lone.to_writer()
                                    lone = None
                                try:  # no pass through the scheduler unless the window is full
                                    send_slots.send_nowait(slot)
                                except trio.WouldBlock:
                                    await send_slots.send(slot)
                                alone = False
                            if sasl is not None and not sasl.authenticated:
                                # Before authentication, one frame at a time: the next
                                # frame's meaning depends on this one's outcome.
                                await self._before_authentication(frame, slot, sasl)
                                if sasl.authenticated:
                                    decoder.max_frame_bytes = self.settings.max_request_bytes
                                continue
                            # Decoding and the handler's synchronous part run here, in
                            # request order; only the waiting part runs as its own task.
                            pending = self._start_request(frame, slot)
                            if alone:
                                assert lean is not None
                                answered = None if pending is None else pending[1]
                                if isinstance(answered, Answered):
                                    assert pending is not None
                                    header = pending[0]
                                    pending = None
                                    if self._send_alone(lean, header, answered.response, slot):
                                        # Sent whole: no slot, no wake-up of the writer.
                                        order.settled()
                                        idle.response_sent()
                                        continue
                                elif isinstance(answered, ProduceOutcome):
                                    assert pending is not None
                                    lone = _LoneProduce(
                                        lean, pending[0], answered, slot, order, idle, send_slots
                                    )
                                    if lone.start():
                                        continue  # the writer is not woken for it at all
                                    lone = None
                                send_slots.send_nowait(slot)  # the window is empty
                            if pending is None:
                                continue
                            header, awaitable = pending
                            if isinstance(awaitable, ProduceOutcome):
                                # Answered in order anyway: the writer finishes it, which
                                # saves a task per request and lets one pass of the loop
                                # answer every Produce a group commit completed.
                                slot.pending = (header, awaitable)
                                slot.set_done()
                            elif isinstance(awaitable, Answered):  # a Fetch with data at hand
                                self._fill_now(header, awaitable.response, slot)
                            elif writer_finishes:
                                # The writer would wait for this response before any later
                                # one anyway: it runs the waiting part (a long-poll Fetch)
                                # itself, which saves a task and a wake-up per request.
                                slot.pending = pending
                                slot.set_done()
                            else:  # wrapped ones may read the request's context variables
                                nursery.start_soon(self._finish_request, pending, slot)
                # Raised, not cancelled: the nursery cancels the requests and re-raises it.
                raise _CloseConnection(
                    f"idle for {self.settings.connections_max_idle_ms} ms "
                    f"(connections.max.idle.ms; {decoder.buffered} bytes of a request pending)"
                )

    async def _write_responses(
        self,
        stream: trio.abc.Stream,
        slots: trio.MemoryReceiveChannel[_ResponseSlot],
        idle: _IdleTimer,
        order: _Sequencer,
    ) -> None:
        held: _ResponseSlot | None = None  # received, not yet settled
        async with slots:
            try:
                async for slot in slots:
                    held = slot
                    if not self._settle_now(slot):
                        await self._settle(slot)
                    order.settled()
                    # Responses already finished behind this one (a group commit ends
                    # several at once) go out in the same send: one syscall, not one each.
                    out = [slot]
                    while not out[-1].close_connection and len(out) < _COALESCE_MAX:
                        try:
                            following = slots.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        held = following
                        if not self._settle_now(following):  # send what is ready, then wait
                            await self._send_slots(stream, out, idle)
                            await self._settle(following)
                            out = []
                        order.settled()
                        out.append(following)
                    await self._send_slots(stream, out, idle)
            finally:
                _close_unstarted(held, slots)

    def _settle_now(self, slot: _ResponseSlot) -> bool:
        """Whether the slot's response is final, finishing a Produce whose appends are all
        durable already (no await: no pass through the event loop)."""
        if not slot.done:
            return False
        if slot.pending is None:
            return True
        header, outcome = slot.pending
        if not isinstance(outcome, ProduceOutcome):  # a coroutine: the writer awaits it
            return False
        try:
            ready, response = outcome.result_now()
            if not ready:
                return False
            payload = self._encode(header, response)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.pending = None
            slot.fill(None, close_connection=True)
            return True
        slot.pending = None
        slot.fill(payload)
        return True

    async def _settle(self, slot: _ResponseSlot) -> None:
        """Wait until the slot's response is final."""
        await slot.wait_done()
        if slot.pending is not None:
            pending, slot.pending = slot.pending, None
            await self._finish_request(pending, slot)

    @staticmethod
    async def _send_slots(
        stream: trio.abc.Stream, out: list[_ResponseSlot], idle: _IdleTimer
    ) -> None:
        payloads = [slot.payload for slot in out if slot.payload is not None]
        whole = [p for p in payloads if isinstance(p, bytes)]
        if len(whole) < len(payloads) or sum(map(len, whole)) > _COALESCE_BYTES:
            await _send_framed(stream, payloads)  # large ones: gathered, nothing copied
        elif whole:  # small ones joined, one send (one TLS record): a view per piece for
            # a gathered send costs more than copying a few hundred bytes
            await stream.send_all(whole[0] if len(whole) == 1 else b"".join(whole))
        for slot in out:
            if slot.close_connection:
                raise _CloseConnection("protocol error")
            idle.response_sent()

    async def _before_authentication(
        self, frame: bytes, slot: _ResponseSlot, sasl: SaslSession
    ) -> None:
        """Serve one frame of a SASL connection that has not authenticated yet."""
        if sasl.state is State.RAW_TOKENS:  # handshake v0: a bare token, no header
            try:
                token = await sasl.step(frame)
            except AuthenticationFailed as exc:
                _client_faults.info("SASL %s authentication failed: %s", sasl.mechanism, exc)
                slot.fill(None, close_connection=True)
                return
            if sasl.authenticated:
                self._authenticated(sasl)
            slot.fill(_framed(token))
            return
        try:
            header, pos = decode_header(frame)
        except ProtocolError as exc:
            _client_faults.warning("closing connection after bad request: %s", exc)
            slot.fill(None, close_connection=True)
            return
        if header.api_key not in _BEFORE_AUTH:
            _client_faults.info(
                "closing connection: %s before SASL authentication",
                ApiKey(header.api_key).name,
            )
            slot.fill(None, close_connection=True)
            return
        if header.api_key == ApiKey.API_VERSIONS:
            pending = self._start_request(frame, slot)
            if pending is not None:
                await self._finish_request(pending, slot)
            return
        try:
            if not SUPPORTED_APIS[header.api_key].accepts(header.api_version):
                raise ProtocolError(f"unsupported version {header.api_version}")
            body = decode_body(header, frame, pos)
        except ProtocolError as exc:
            _client_faults.warning("closing connection after bad SASL request: %s", exc)
            slot.fill(None, close_connection=True)
            return
        response: dict[str, Any]
        close = False
        try:
            if header.api_key == ApiKey.SASL_HANDSHAKE:
                response = sasl.handshake(header.api_version, body.mechanism)
                close = response["error_code"] != ErrorCode.NONE
            else:
                token = await sasl.step(body.auth_bytes)
                response = {"error_code": ErrorCode.NONE, "auth_bytes": token}
                if sasl.authenticated:
                    self._authenticated(sasl)
        except SaslStateError as exc:
            response = {"error_code": ILLEGAL_SASL_STATE, "error_message": str(exc)}
            close = True
        except AuthenticationFailed as exc:
            _client_faults.info("SASL %s authentication failed: %s", sasl.mechanism, exc)
            response = {
                "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": str(exc),
                "auth_bytes": b"",
            }
            close = True
        slot.fill(_framed(encode_response(header, response)), close_connection=close)

    @staticmethod
    def _authenticated(sasl: SaslSession) -> None:
        # Set in the connection's task: every request task started later inherits it.
        assert sasl.principal is not None
        PRINCIPAL.set(sasl.principal)
        log.debug("SASL %s authenticated %s", sasl.mechanism, sasl.principal)

    def _start_request(
        self, frame: bytes, slot: _ResponseSlot
    ) -> tuple[RequestHeader, Awaitable[Any]] | None:
        """Decode a frame and call its handler; None if the slot was already filled."""
        try:
            header, pos = decode_header(frame)
            support = SUPPORTED_APIS[header.api_key]
            if not support.accepts(header.api_version):
                if header.api_key == ApiKey.API_VERSIONS:
                    # Answered in v0 so the client can retry with a version we speak.
                    downgraded = RequestHeader(
                        header.api_key, 0, header.correlation_id, header.client_id, False
                    )
                    body = admin.api_versions_body(ErrorCode.UNSUPPORTED_VERSION)
                    slot.fill(_framed(encode_response(downgraded, body)))
                    return None
                raise ProtocolError(
                    f"unsupported version {header.api_version} of {ApiKey(header.api_key).name}"
                )
            request: Any
            hand_written = _HAND_DECODERS.get(header.api_key)
            if hand_written is not None:  # the hot paths: no kio dataclasses
                request = hand_written(frame, pos, header.api_version)
            else:
                request = decode_body(header, frame, pos)
            return header, self.handlers[header.api_key](self.ctx, header, request)
        except ProtocolError as exc:
            _client_faults.warning("closing connection after bad request: %s", exc)
        except Exception:
            log.exception("handler failed; closing the connection")
        slot.fill(None, close_connection=True)
        return None

    def _send_alone(
        self,
        stream: LeanSocketStream,
        header: RequestHeader,
        response: list[bytes | memoryview],
        slot: _ResponseSlot,
    ) -> bool:
        """Send a response known at once, with no other in flight, from the reader: True if
        it went out whole; otherwise `slot` holds it, or the part the socket did not take
        (the writer sends that)."""
        self._fill_now(header, response, slot)
        return _send_whole_now(stream, slot)

    def _fill_now(
        self, header: RequestHeader, response: list[bytes | memoryview], slot: _ResponseSlot
    ) -> None:
        """Answer a request whose response the handler already had (no task of its own)."""
        try:
            payload = self._encode(header, response)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            return
        slot.fill(payload)

    async def _finish_request(
        self, pending: tuple[RequestHeader, Awaitable[Any]], slot: _ResponseSlot
    ) -> None:
        header, awaitable = pending
        try:
            payload = self._encode(header, await awaitable)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            return
        slot.fill(payload)

    @staticmethod
    def _encode(
        header: RequestHeader, response: dict[str, Any] | bytes | list[bytes | memoryview] | None
    ) -> Framed | None:
        """A handler's answer as a framed response (None: no response, acks=0)."""
        if response is None:
            return None
        if isinstance(response, dict):
            if header.api_key == ApiKey.PRODUCE:  # the hot path: no kio dataclasses
                response = encode_produce_response(
                    header.correlation_id, header.api_version, response
                )
            else:
                response = encode_response(header, response)
        return _framed(response)


# A response is one buffer, or its size prefix and body pieces apart: prepending four
# bytes to a large body would copy it whole (a Fetch response of megabytes), and a Fetch
# response comes in pieces (its batches as read); a gathered send (`sendmsg`) writes them
# all from where they are. A small one in pieces (a caught-up Fetch: some fifty pieces of
# framing) is joined instead: a view per piece and a long iovec cost several times the copy.
Framed = bytes | tuple[bytes | memoryview, ...]
_PREFIX_APART_BYTES = 64 * 1024
_JOIN_PIECES_BELOW = 16 * 1024


def _framed(payload: bytes | list[bytes | memoryview]) -> Framed:
    if isinstance(payload, list):
        size = sum(map(len, payload))
        if size < _JOIN_PIECES_BELOW:
            return b"".join((_SIZE.pack(size), *payload))
        return (_SIZE.pack(size), *payload)
    if len(payload) >= _PREFIX_APART_BYTES:
        return _SIZE.pack(len(payload)), payload
    return _SIZE.pack(len(payload)) + payload


async def _send_framed(stream: trio.abc.Stream, responses: list[Framed]) -> None:
    """Send responses in order: gathered in one call on plain TCP; over TLS each response
    in one piece (many small pieces would each become a TLS record)."""
    if isinstance(stream, LeanSocketStream):
        await stream.send_all_buffers(
            [b for r in responses for b in ((r,) if isinstance(r, bytes) else r)]
        )
        return
    for response in responses:
        await stream.send_all(response if isinstance(response, bytes) else b"".join(response))


def _close_unstarted(
    held: _ResponseSlot | None, slots: trio.MemoryReceiveChannel[_ResponseSlot]
) -> None:
    """Close the waiting parts the writer never started (the connection is going away):
    none is left unawaited, and a long-poll Fetch takes its waiters off its partitions."""
    while True:
        if held is not None and held.pending is not None:
            close = getattr(held.pending[1], "close", None)
            held.pending = None
            if close is not None:
                close()
        try:
            held = slots.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return


def _peer_name(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
