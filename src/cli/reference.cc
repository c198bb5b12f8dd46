#include "cli/reference.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/config_file.h"

namespace outboxd::cli {
namespace {

constexpr char kIntroduction[] = R"md(# Configuration reference

<!-- Generated from the flag definitions in src/cli/ by
     build/bin/outboxd --help-reference > docs/configuration.md
     Do not edit by hand: tests/cli fails when this file and that output differ. -->

Every flag of every command can also be set by an environment variable and in a
configuration file. When one setting comes from several places, the first of these wins:

1. the flag: `--max-in-flight 1000`;
2. its environment variable, `OUTBOXD_` and the flag's name in capitals with dashes as
   underscores: `OUTBOXD_MAX_IN_FLIGHT=1000`;
3. the configuration file named by `--config FILE` (or `OUTBOXD_CONFIG`):
   `max-in-flight = 1000`;
4. the built-in default (the tables below).

A repeatable flag (`--kafka`) given in a higher place replaces the whole list of a lower
one; the lists are not merged.

A repeatable flag's environment variable (`OUTBOXD_KAFKA`, `OUTBOXD_HEADER`,
`OUTBOXD_KAFKA_SECRET_FILE`) takes several values, one per line; empty lines are
skipped. A newline is the separator because no value of those flags contains one,
while commas, semicolons and spaces all occur in librdkafka values (a broker list, a
JAAS configuration). PEM text, the one librdkafka value with newlines, goes in a file:
`--kafka-secret-file ssl.key.pem=/run/secrets/kafka.key`.

    OUTBOXD_KAFKA=$'linger.ms=5\ncompression.type=lz4' outboxd run ...   # bash

```yaml
# compose.yaml, a service's environment: a block scalar, one value per line
environment:
  OUTBOXD_KAFKA: |
    linger.ms=5
    compression.type=lz4
```

## The configuration file

[TOML](https://toml.io). Keys are the flag names without the dashes. Values are strings
(durations too: `"10s"`; sizes may be `"64MiB"` or an integer), integers, booleans for
switches (`json = true`) and arrays of strings for repeatable flags. A table named after
a command (`[run]`, `[cleanup]`, `[dead-letter.replay]`) applies to that command only and
overrides the top-level keys; put there the keys whose meaning differs by command
(`batch` is rows per poll for `poll`, rows per DELETE for `cleanup`). A top-level key
the chosen command does not take is ignored, so one file serves `setup`, `run`,
`cleanup` and `status`; a key no command takes, a value of the wrong type or a file
that cannot be read stops the command with exit code 2 and one line naming the file,
the line and the fix:

    outboxd.toml:3: unknown key "brokerz"; see outboxd run --help
    outboxd.toml:7: max-in-flight must be an integer, e.g. max-in-flight = 100000

Example:

```toml
# outboxd.toml
pg = "host=db dbname=app user=outboxd sslmode=verify-full"
brokers = "kafka1:9092,kafka2:9092"
kafka = ["linger.ms=5", "compression.type=lz4"]
slot = "outboxd"

[run]
max-in-flight = 50000
feedback-interval = "5s"

[cleanup]
retention = "3d"
batch = 10000
```

    outboxd setup --config outboxd.toml
    outboxd run --config outboxd.toml
    OUTBOXD_CONFIG=outboxd.toml outboxd cleanup --retention 1d   # the flag wins over [cleanup]
)md";

// Table cells: a pipe would end the cell (even in code), a < start an HTML tag.
std::string Cell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"<", "\\<"}});
}

std::string Code(const std::string& text) {
  if (text.empty()) return "";
  return absl::StrCat("`", absl::StrReplaceAll(text, {{"|", "\\|"}}), "`");
}

std::string Row(const CLI::Option& option) {
  const std::string key = ConfigKey(option);
  const ConfigType type = ConfigTypeOf(option);
  std::string value = option.get_default_str();
  if (option.get_required()) {
    value = "*required*";
  } else if (type == ConfigType::kBoolean && value.empty()) {
    value = "`false`";
  } else {
    value = Code(value);
  }
  return absl::StrCat("| ", Code(option.get_name()), " | ", Code(option.get_envname()), " | ",
                      key.empty() ? "—" : absl::StrCat(Code(key), " (", ConfigTypeName(type), ")"),
                      " | ", value, " | ", Cell(option.get_description()), " |\n");
}

bool Documented(const CLI::Option* option) {
  if (option->get_group().empty() || option->get_lnames().empty()) return false;
  const std::string& name = option->get_lnames().front();
  return name != "help" && name != "version";
}

void AppendCommand(const CLI::App& command, const std::vector<std::string>& path,
                   std::string* out) {
  std::vector<const CLI::Option*> options = command.get_options(Documented);
  if (options.empty()) return;
  const std::string title =
      path.empty() ? "Every command" : absl::StrCat("outboxd ", absl::StrJoin(path, " "));
  absl::StrAppend(out, "\n## ", title, "\n\n", command.get_description(), ".");
  if (!path.empty()) absl::StrAppend(out, " File table: `[", absl::StrJoin(path, "."), "]`.");
  absl::StrAppend(out,
                  "\n\n| flag | environment variable | file key (type) | default | description "
                  "|\n|---|---|---|---|---|\n");
  for (const CLI::Option* option : options) absl::StrAppend(out, Row(*option));
}

void AppendTree(const CLI::App& app, std::vector<std::string> path, std::string* out) {
  AppendCommand(app, path, out);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_group().empty()) continue;  // hidden
    std::vector<std::string> deeper = path;
    deeper.push_back(sub->get_name());
    AppendTree(*sub, deeper, out);
  }
}

}  // namespace

std::string ConfigurationReference(const CLI::App& app) {
  std::string out = kIntroduction;
  AppendTree(app, {}, &out);
  return out;
}

}  // namespace outboxd::cli
