// ablate query "SELECT ..." [--max-rows N] [--format table|json|csv]
//
// Read-only SQL on the results database (the coordinator runs it on a read-only connection with a
// time and row limit). Prints the columns and rows; when the server cut the result at its row
// limit, a note on stderr says so (stdout stays a clean table / JSON / CSV).
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct QueryOptions {
  std::string sql;   // "-" reads the statement from standard input
  int max_rows = 0;  // 0: the server's default limit
  Format format = Format::kTable;
};

Status RunQuery(Client& client, const QueryOptions& options, const Io& io);
void AddQueryCommand(CLI::App& app, Action* selected);

Table QueryTable(const v1::QueryResponse& resp);

}  // namespace ablate::cli
