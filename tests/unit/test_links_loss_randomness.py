"""Which engines' random loss is seeded (issue 26), as every run's link_counters say it: only the wire's;
the kernel's (nftables numgen) and netem's name the wire engine for a reproducible loss pattern. The
record itself, through `roughnet run`: tests/integration/test_loss_reproducibility.py."""

from __future__ import annotations

from roughnet.links import wire


def test_every_engines_counters_say_whether_its_loss_is_reproducible() -> None:
    """The record's link_counters (issue 26): only the wire's loss is seeded; the others name the wire."""
    from roughnet.links.base import LOSS_RANDOMNESS, loss_randomness

    c = wire.counters_from_stats({"seed": 7}, {}, ("a", "b"))
    assert c["loss_reproducible"] is True and c["seed"] == 7
    assert {e: r for e, (r, _) in LOSS_RANDOMNESS.items()} == {"kernel": False, "netem": False, "wire": True}
    for engine in ("kernel", "netem"):
        assert 'engine = "wire"' in loss_randomness(engine)["loss_random"]
