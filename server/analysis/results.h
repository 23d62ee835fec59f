// The ablation table's verdict on a "best" cell (`ablate results`, GET /api/sweeps/X/results, the
// dashboard): a cell is marked best only when its 95% interval of the mean lies entirely on the
// better side of every other cell's interval, so a best is never read out of seed noise. Cells
// without a value are ignored; a cell with a value but fewer than 2 of them (no interval) can be
// separated from nothing, so then no cell is marked. Non-overlapping intervals are a conservative
// rule (a paired comparison, `ablate compare`, can find a difference they do not).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "store/store.h"

namespace ablate::analysis {

// Losses, errors, perplexities, times: lower is better; anything else: higher.
bool LowerIsBetter(const std::string& metric);

// The index of the separated best row, or -1.
int SeparatedBest(const std::vector<server::ResultRow>& rows, bool lower_is_better);

}  // namespace ablate::analysis
