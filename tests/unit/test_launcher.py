"""Pure pieces of the broker launcher."""

from __future__ import annotations

from safeconsumer.testing._container import env_for
from safeconsumer.testing._local import _cluster_id


def test_cluster_ids_never_look_like_options() -> None:
    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)


def test_container_env_names_follow_the_image_convention() -> None:
    assert env_for({"group.max.size": "2", "group.consumer.max.size": 3}) == {  # type: ignore[dict-item]
        "KAFKA_GROUP_MAX_SIZE": "2",
        "KAFKA_GROUP_CONSUMER_MAX_SIZE": "3",
    }
