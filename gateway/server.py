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

A connection's bookkeeping (response slots, the sequencer, the idle timer, framing) lives in
`gateway.connection`; a lone Produce answered where its appends end, in `gateway.lone_produce`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from core.errors import ErrorCode
from gateway.authorization.guard import guarded, test_principal_enabled
from gateway.connection import (
    Framed,
    IdleTimer,
    ResponseSlot,
    Sequencer,
    encode_answer,
    framed,
    send_whole_now,
)
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
from gateway.lone_produce import LoneProduce
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


class _CloseConnection(Exception):
    pass


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
        send_slots, receive_slots = trio.open_memory_channel[ResponseSlot](
            self.settings.max_in_flight_per_connection
        )
        idle = IdleTimer(self.settings.connections_max_idle_ms)
        order = Sequencer()
        # Whether the writer task may run a handler's waiting part: only where no request
        # changes the connection's context variables after the writer started (a SASL
        # login or the authorizer's test principal set PRINCIPAL in the reader's context).
        writer_finishes = sasl is None and self.ctx.authorizer is None
        lean = stream if isinstance(stream, LeanSocketStream) else None
        lone: LoneProduce | None = None  # a lone Produce its appends' end will answer
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
                            slot = ResponseSlot()
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
                                    lone = LoneProduce(
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
        slots: trio.MemoryReceiveChannel[ResponseSlot],
        idle: IdleTimer,
        order: Sequencer,
    ) -> None:
        held: ResponseSlot | None = None  # received, not yet settled
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

    def _settle_now(self, slot: ResponseSlot) -> bool:
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
            payload = encode_answer(header, response)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.pending = None
            slot.fill(None, close_connection=True)
            return True
        slot.pending = None
        slot.fill(payload)
        return True

    async def _settle(self, slot: ResponseSlot) -> None:
        """Wait until the slot's response is final."""
        await slot.wait_done()
        if slot.pending is not None:
            pending, slot.pending = slot.pending, None
            await self._finish_request(pending, slot)

    @staticmethod
    async def _send_slots(
        stream: trio.abc.Stream, out: list[ResponseSlot], idle: IdleTimer
    ) -> None:
        payloads = [slot.payload for slot in out if slot.payload is not None]
        whole = [p for p in payloads if isinstance(p, bytes)]
        if len(whole) < len(payloads) or sum(map(len, whole)) > _COALESCE_BYTES:
            await _sendframed(stream, payloads)  # large ones: gathered, nothing copied
        elif whole:  # small ones joined, one send (one TLS record): a view per piece for
            # a gathered send costs more than copying a few hundred bytes
            await stream.send_all(whole[0] if len(whole) == 1 else b"".join(whole))
        for slot in out:
            if slot.close_connection:
                raise _CloseConnection("protocol error")
            idle.response_sent()

    async def _before_authentication(
        self, frame: bytes, slot: ResponseSlot, sasl: SaslSession
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
            slot.fill(framed(token))
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
        slot.fill(framed(encode_response(header, response)), close_connection=close)

    @staticmethod
    def _authenticated(sasl: SaslSession) -> None:
        # Set in the connection's task: every request task started later inherits it.
        assert sasl.principal is not None
        PRINCIPAL.set(sasl.principal)
        log.debug("SASL %s authenticated %s", sasl.mechanism, sasl.principal)

    def _start_request(
        self, frame: bytes, slot: ResponseSlot
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
                    slot.fill(framed(encode_response(downgraded, body)))
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
        slot: ResponseSlot,
    ) -> bool:
        """Send a response known at once, with no other in flight, from the reader: True if
        it went out whole; otherwise `slot` holds it, or the part the socket did not take
        (the writer sends that)."""
        self._fill_now(header, response, slot)
        return send_whole_now(stream, slot)

    def _fill_now(
        self, header: RequestHeader, response: list[bytes | memoryview], slot: ResponseSlot
    ) -> None:
        """Answer a request whose response the handler already had (no task of its own)."""
        try:
            payload = encode_answer(header, response)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            return
        slot.fill(payload)

    async def _finish_request(
        self, pending: tuple[RequestHeader, Awaitable[Any]], slot: ResponseSlot
    ) -> None:
        header, awaitable = pending
        try:
            payload = encode_answer(header, await awaitable)
        except Exception:
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            return
        slot.fill(payload)


async def _sendframed(stream: trio.abc.Stream, responses: list[Framed]) -> None:
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
    held: ResponseSlot | None, slots: trio.MemoryReceiveChannel[ResponseSlot]
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
