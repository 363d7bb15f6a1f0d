// kvevict tools — cli/run_tool.cpp: a tool's main: parse the flags, run its body, report errors with the exit codes.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <new>

#include "cli/kvevict_cli.hpp"

namespace kvcli {

namespace {

// Levenshtein distance (insertions, deletions, substitutions), O(|a| · |b|).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string unknown_flag_message(const CLI::App& app, const std::string& typed,
                                 const std::map<std::string, std::string>& hints) {
  const std::string name = typed.substr(0, typed.find('='));
  if (const auto hint = hints.find(name); hint != hints.end()) return name + ": unknown flag; " + hint->second;
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& long_name : opt->get_lnames()) {
      const std::string candidate = "--" + long_name;
      const bool prefix = candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0;
      const std::size_t d = prefix ? 1 : edit_distance(name, candidate);
      if (d < best_distance) best_distance = d, best = candidate;
    }
  }
  if (!best.empty() && best_distance <= std::max<std::size_t>(2, name.size() / 3))
    return name + ": unknown flag; did you mean " + best + "? (see --help)";
  return name + ": unknown flag (see --help)";
}

int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body,
             const std::map<std::string, std::string>& hints) {
  auto report = [&tool](const std::string& message, int code) {
    std::string line = message;
    for (char& c : line)
      if (c == '\n' || c == '\r') c = ' ';
    std::cerr << tool << ": " << line << std::endl;
    return code;
  };
  app.footer(help_footer());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    for (const std::string& arg : app.remaining())
      if (arg.size() > 1 && arg[0] == '-') return report(unknown_flag_message(app, arg, hints), kExitUsage);
    return report(std::string(e.what()) + " (see --help)", kExitUsage);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return report(std::string(e.what()) + " (see --help)", kExitUsage);
  }
  // An option given an empty value (`--kept-out ""`) is refused, naming it: a flag whose empty value the tool
  // would take as "not given" must not be dropped silently, and no option of these tools means anything empty.
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0 || opt->count() == 0) continue;  // a flag, or not given
    for (const std::string& value : opt->results())
      if (value.empty())
        return report((opt->get_lnames().empty() ? opt->get_name() : "--" + opt->get_lnames().front()) +
                          ": needs a value (got an empty one)",
                      kExitUsage);
  }
  try {
    return body();
  } catch (const UsageError& e) {
    return report(e.what(), kExitUsage);
  } catch (const std::invalid_argument& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::length_error& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::out_of_range& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitFailure);
  } catch (const std::exception& e) {
    return report(strip_origin(e.what()), kExitFailure);
  } catch (...) {
    return report("unknown failure", kExitFailure);
  }
}

}  // namespace kvcli
