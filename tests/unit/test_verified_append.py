"""VerifiedAppend: a deferred transactional write starts only when verified, and writes of
one producer to one partition start in the order they came."""

from __future__ import annotations

import trio

from core.api import AppendResult
from core.errors import ErrorCode
from core.txn.verified_append import VerifiedAppend


def test_refused_writes_never_start_and_the_order_holds() -> None:
    started: list[str] = []

    def start(name: str):  # type: ignore[no-untyped-def]
        def go() -> AppendResult:
            started.append(name)
            return AppendResult(ErrorCode.NONE, base_offset=len(started))

        return go

    def verdict(code: int, delay: float):  # type: ignore[no-untyped-def]
        async def verify() -> int:
            await trio.sleep(delay)
            return code

        return verify

    async def main() -> dict[str, AppendResult]:
        first_done, second_done, third_done = trio.Event(), trio.Event(), trio.Event()
        first = VerifiedAppend(verdict(0, 0.05), start("first"), None, first_done)
        second = VerifiedAppend(verdict(48, 0), start("second"), first_done, second_done)
        third = VerifiedAppend(verdict(0, 0), start("third"), second_done, third_done)
        results: dict[str, AppendResult] = {}

        async def run(name: str, append: VerifiedAppend) -> None:
            results[name] = await append.wait()

        async with trio.open_nursery() as nursery:  # the last one is awaited first
            nursery.start_soon(run, "third", third)
            nursery.start_soon(run, "second", second)
            nursery.start_soon(run, "first", first)
        assert first.result_now() is results["first"]
        return results

    results = trio.run(main)
    assert started == ["first", "third"]
    assert results["second"].error == ErrorCode.INVALID_TXN_STATE
    assert results["third"].error == ErrorCode.NONE
