"""Elastic streams: when and how a stream's open segments split, merge and move.

Pure parts: scale-event validation and split cuts (`plan.py`), the policy (`policy.py`),
placing segments on nodes (`placement.py`), handing cold segments to a neighbour's node
(`gather.py`), test crash points (`crash.py`). The scaler task (`scaler.py`) measures each
stream's rates and applies the policy's decisions through the store; it reads a stream
through the `ScaledStream` protocol, so scaling stays below `core.stream`.
"""
