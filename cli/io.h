// Where a command writes and what it knows about its terminal, injected so tests can capture output
// and fix the clock.
#pragma once

#include <functional>
#include <iosfwd>

namespace ablate::cli {

struct Io {
  std::ostream* out = nullptr;  // results (tables, JSON, CSV)
  std::ostream* err = nullptr;  // errors, notes, progress that is not the result
  bool tty = false;             // `out` is a terminal: redraw in place, Unicode bars
  int width = 100;              // terminal columns (lines are cut to fit when tty)
  int height = 40;              // terminal rows
  std::function<double()> now;  // unix seconds (wall clock)
};

}  // namespace ablate::cli
