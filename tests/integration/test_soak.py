"""A short soak (tests/soak): member processes started, SIGKILLed and SIGTERMed at random while
each pauses, resumes and keeps alive at random, on two brokers of which one is SIGKILLed and
restarted and between which the group coordinator moves; nothing lost, offsets committed to the
end, no I1/I2/I4 violation, nothing left paused, no partition "healed" by the stall guard.
``make soak`` runs the long one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from safeconsumer.testing import KafkaTestKit

from ..cluster import FAULT_SETTINGS, Cluster, running_cluster
from ..soak.run import MODES, Mode, run_soak
from ..soak.share import run_share_soak

# Member processes killed and started at random take both cores: alone, after the parallel phase.
pytestmark = pytest.mark.serial

#: Chaos time per protocol, with a broker SIGKILL-and-restart and a coordinator move in it; with
#: member start-up and the final drain the test takes about 45 s.
SECONDS = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(FAULT_SETTINGS) as c:
        yield c


@pytest.mark.parametrize("protocol", MODES)
def test_short_soak_loses_nothing_and_keeps_every_invariant(cluster: Cluster, protocol: Mode) -> None:
    """Under each protocol, and ``mixed``: members alternate between classic cooperative-sticky and
    the consumer protocol as they start, so the group converts back and forth."""
    kit = KafkaTestKit(cluster.bootstrap_servers, prefix=f"soak-{protocol}")
    try:
        figures = run_soak(
            kit, protocol, seconds=SECONDS, seed="pytest", drain_timeout=60.0, faults=cluster, fault_every=12.0
        )
    finally:
        kit.close()
    assert len(figures.faults) == 2, figures.report()  # a broker SIGKILLed and restarted, a coordinator move
    assert figures.starts > 3 and figures.kills + figures.terms > 0, figures.report()
    assert figures.produced > 0 and figures.delivered >= figures.produced, figures.report()
    assert figures.violations == [], figures.report()
    assert figures.lost == 0, figures.report()
    assert figures.stalls == 0, figures.report()  # a healthy member is never "healed" (I11)
    assert figures.failures == [], figures.report()


#: Chaos time of the short share soak per acknowledgement mode (with the drain, about a minute).
SHARE_SECONDS = 30.0


@pytest.mark.parametrize("mode", ["implicit", "explicit"])
def test_short_share_soak_archives_nothing_without_a_copy_and_explains_every_double(
    kafka: KafkaTestKit, mode: str
) -> None:
    """SafeShareConsumer members started and SIGTERMed at random, with slow work past the lock,
    poison records and pauses (tests/soak/share.py; ``make soak`` SIGKILLs members and a broker
    too): every record processed or dead-lettered, every poison record dead-lettered, every double
    processing explained by a termination or a reported lock overrun, every member's exit status
    the expected one."""
    figures = run_share_soak(kafka, mode, seconds=SHARE_SECONDS, seed="pytest", kills=False)
    assert figures.starts > 3 and figures.terms > 0, figures.report()
    assert figures.produced > 0 and figures.poison > 0, figures.report()
    # Every member exited as told (0 after SIGTERM), none on its own: a death names its reason.
    assert figures.member_failures == [], figures.report()
    assert figures.died == 0, figures.report()
    assert figures.failures == [], figures.report()
    assert figures.lost == [], figures.report()
    assert figures.poison_missing == [], figures.report()
    assert figures.unexplained == [], figures.report()
