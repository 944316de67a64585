from __future__ import annotations

import pytest

from safeconsumer.testing import PROTOCOLS, Protocol


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> Protocol:
    """Each test using this runs under classic range, classic cooperative-sticky and KIP-848."""
    value: Protocol = request.param
    return value
