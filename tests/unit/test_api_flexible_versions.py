"""The hand-written table of first flexible versions (kafkawire/apis.py) agrees with
the message schemas kio generates from Kafka's JSON specs, for every version served."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema, load_response_schema

from kafkawire.apis import SUPPORTED_APIS, ApiKey


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_APIS), ids=lambda k: ApiKey(k).name)
def test_first_flexible_version_matches_kio(api_key: int) -> None:
    support = SUPPORTED_APIS[api_key]
    for version in range(support.min_version, support.max_version + 1):  # the accepted ones
        for load in (load_request_schema, load_response_schema):
            schema = load(api_key, version)
            assert schema.__flexible__ == support.is_flexible(version), (load.__name__, version)
