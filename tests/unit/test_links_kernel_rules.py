"""The kernel engine's nftables loss rules (no namespaces): a fraction draws from numgen, and 100 % loss
drops every frame without a numgen draw (`numgen random mod 1000000 < 1000000` is out of numgen's range and
nft refused it, so `loss = "100%"` on the kernel engine failed the run)."""

from __future__ import annotations

import pytest

from roughnet.links.kernel import nft_ruleset


def test_a_fraction_is_drawn_from_numgen() -> None:
    text = nft_ruleset("rn0", [("forward_rn0_b", "rn0-b", 0.05)])
    assert 'numgen random mod 1000000 < 50000 counter drop comment "loss"' in text


@pytest.mark.parametrize("loss", [1.0, 0.9999995])
def test_all_frames_are_dropped_without_numgen(loss: float) -> None:
    text = nft_ruleset("rn0", [("reverse_rn0_a", "rn0-a", loss)])
    assert "numgen" not in text and '    counter drop comment "loss"' in text

