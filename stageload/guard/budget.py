"""The running budget: should the command be stopped now? Pure logic over a stream of readings,
so it can be tested on recorded figures (the tests replay a recorded swap run-away).

What an unknown reading means here: the budget cannot act on what it cannot read. A sample
whose ``available`` (or, for a percent threshold, ``total``) is None neither counts as low nor
breaks a run of low samples; a sample whose ``swap`` is None is not judged for swap. When swap
was unknown at start, the first readable value becomes the baseline (growth before it goes
unseen). Admission refuses to start while these readings are unknown, so this only matters
when a reading fails mid-run.
"""
from __future__ import annotations

from dataclasses import dataclass

from meshfacts.units import format_percent, format_size

from . import pressure as pressure_mod
from .config import GuardConfig


@dataclass
class Budget:
    """Stateful budget check for one run.

    ``swap_at_start``: swap in use (bytes) when the command started, None if unknown. Feed each
    sample's readings to :meth:`observe`; it returns the reason to stop, or None.
    ``low_samples`` / ``pressure_samples``: consecutive samples under ``--kill-free`` / at or
    above ``--stop-at-pressure`` so far.
    """

    config: GuardConfig
    swap_at_start: int | None
    low_samples: int = 0
    pressure_samples: int = 0

    def observe(self, readings: dict) -> str | None:
        """Judge one sample (readings dict, bytes). Returns a reason such as
        ``swap +8.3 GiB over start (budget 8.0 GiB)`` when the command must stop, else None."""
        reasons = []
        swap = readings.get("swap")
        if self.config.swap_budget is not None and swap is not None:
            if self.swap_at_start is None:
                self.swap_at_start = swap
            growth = swap - self.swap_at_start
            if growth > self.config.swap_budget:
                reasons.append(f"swap +{format_size(growth)} over start (budget "
                               f"{format_size(self.config.swap_budget)})")

        kill_free = self.config.kill_free
        available, total = readings.get("available"), readings.get("total")
        if kill_free is not None and available is not None:
            threshold = kill_free.resolve(total)
            if threshold is not None:
                if available < threshold:
                    self.low_samples += 1
                    if self.low_samples >= self.config.kill_samples:
                        shown = (format_percent(available, total) if kill_free.percent is not None
                                 else format_size(available))
                        reasons.append(f"available {shown} < {kill_free} for {self.low_samples} "
                                       f"consecutive samples")
                else:
                    self.low_samples = 0
        self.pressure_samples, reason = pressure_mod.observe_stop(
            self.config.stop_at_pressure, readings.get("pressure"), self.pressure_samples,
            self.config.kill_samples)
        if reason:
            reasons.append(reason)
        return "; ".join(reasons) if reasons else None

    def growth(self, readings: dict) -> int | None:
        """Swap growth in bytes since start for these readings (None when unknown)."""
        swap = readings.get("swap")
        if swap is None or self.swap_at_start is None:
            return None
        return swap - self.swap_at_start
