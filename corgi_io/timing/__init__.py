"""Where a loader's time goes: the stages it is split into, the per-process clocks that time them, the shared
board that carries their totals from DataLoader workers to the training process, and the pure summaries
(shares, verdict, straggler) that `CorgiPileDataset.stats`, `corgi profile` and the JSON lines report.

No torch here: `corgi_io.loaders.pipeline_stats` puts the board in torch's shared memory."""
from corgi_io.timing.stages import FIELDS, STAGES, TIMINGS, Stage, stage_index

__all__ = ["FIELDS", "STAGES", "TIMINGS", "Stage", "stage_index"]
