// hsgd config: the config reference (--reference), or the resolved config
// of --config and --set as config.toml would hold it, with the moot-setting
// warnings; nothing is trained or written.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hsgd/cli/commands.h"
#include "hsgd/config/effective.h"
#include "hsgd/core/error.h"

namespace hsgd::cli {

void warn_moot_settings(const Config& c) {
  for (const std::string& line : moot_settings(c)) {
    std::fprintf(stderr, "hsgd: warning: %s\n", line.c_str());
  }
}

void warn_moot_in_every(const std::vector<Config>& configs) {
  std::map<std::string, std::pair<size_t, std::string>> seen;  // key -> (configs, first line)
  std::vector<std::string> order;
  for (const Config& c : configs) {
    for (const std::string& line : moot_settings(c)) {
      const std::string key = line.substr(0, line.find(" = "));
      auto [it, fresh] = seen.try_emplace(key, 0, line);
      if (fresh) order.push_back(key);
      ++it->second.first;
    }
  }
  for (const std::string& key : order) {
    const auto& [count, line] = seen.at(key);
    if (count == configs.size()) std::fprintf(stderr, "hsgd: warning: %s\n", line.c_str());
  }
}

double common_budget(const std::vector<Config>& configs) {
  double budget = 0;
  for (const Config& c : configs) {
    if (c.train.epochs > 0) return 0;
    budget = std::max(budget, c.train.budget);
  }
  return budget;
}

namespace {

// --check FILE...: one line per file on stdout ("FILE: valid config", or the
// grid's run count), one error line per bad file on stderr, naming the file.
int check_files(const std::vector<std::string>& files) {
  int bad = 0;
  for (const std::string& f : files) {
    try {
      if (is_sweep_grid(f)) {
        SweepArgs sa;
        sa.grid_path = f;
        sa.check = true;
        sweep(sa);
      } else {
        for (const std::string& line : moot_settings(load_config(f, {}))) {
          std::fprintf(stderr, "hsgd: warning: %s: %s\n", f.c_str(), line.c_str());
        }
        std::printf("%s: valid config\n", f.c_str());
      }
    } catch (const InputError& e) {
      const std::string what = e.what();
      const std::string named = what.rfind(f, 0) == 0 ? what : f + ": " + what;
      std::fprintf(stderr, "hsgd: error: %s\n", named.c_str());
      ++bad;
    }
    std::fflush(stdout);
  }
  if (bad > 0) {
    std::fprintf(stderr, "hsgd: %d of %zu files are bad\n", bad, files.size());
    return 2;
  }
  return 0;
}

}  // namespace

int config(const ConfigArgs& a) {
  if (!a.check.empty()) {
    if (a.reference || !a.config_path.empty() || !a.overrides.empty()) {
      throw InputError(
          "--check: validates each file as it is; expected no --config, --set or --reference");
    }
    return check_files(a.check);
  }
  if (a.reference) {
    if (!a.config_path.empty() || !a.overrides.empty()) {
      throw InputError(
          "--reference: prints the reference of every key; expected no --config or --set");
    }
    std::fputs(config_reference_markdown().c_str(), stdout);
    return 0;
  }
  const Config c = load_config(a.config_path, a.overrides);
  warn_moot_settings(c);
  std::fputs(to_toml(c).c_str(), stdout);
  return 0;
}

}  // namespace hsgd::cli
