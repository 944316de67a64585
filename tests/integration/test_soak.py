"""A short soak (tests/soak): member processes started, SIGKILLed and SIGTERMed at random while
each pauses, resumes and keeps alive at random; nothing lost, offsets committed to the end, no
I1/I2/I4 violation, nothing left paused, no partition "healed" by the stall guard. ``make soak`` runs the long one."""

from __future__ import annotations

import pytest

from safeconsumer.testing import KafkaTestKit, Protocol

from ..soak.run import run_soak

# Member processes killed and started at random take both cores: alone, after the parallel phase.
pytestmark = pytest.mark.serial

#: Chaos time per protocol; with member start-up and the final drain the test takes about 30 s.
SECONDS = 20.0


def test_short_soak_loses_nothing_and_keeps_every_invariant(kafka: KafkaTestKit, protocol: Protocol) -> None:
    figures = run_soak(kafka, protocol, seconds=SECONDS, seed="pytest", drain_timeout=45.0)
    assert figures.starts > 3 and figures.kills + figures.terms > 0, figures.report()
    assert figures.produced > 0 and figures.delivered >= figures.produced, figures.report()
    assert figures.violations == [], figures.report()
    assert figures.lost == 0, figures.report()
    assert figures.stalls == 0, figures.report()  # a healthy member is never "healed" (I11)
    assert figures.failures == [], figures.report()
