#include "cli/config_file.h"

#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/read_file.h"
#include "cli/common.h"

// Header-only, in this file alone: no runtime library, parse errors as values.
#define TOML_EXCEPTIONS 0
#include "toml++/toml.h"

namespace outboxd::cli {
namespace {

std::vector<CLI::App*> Subcommands(CLI::App* app) {
  return app->get_subcommands([](CLI::App*) { return true; });
}

bool TakesFlags(CLI::App* app) { return Subcommands(app).empty(); }

CLI::App* FindSubcommand(CLI::App* app, const std::string& name) {
  for (CLI::App* sub : Subcommands(app)) {
    if (sub->check_name(name)) return sub;
  }
  return nullptr;
}

// What argv asks for: the config path and the command, before CLI11 parses it.
struct Invocation {
  std::string config;
  std::vector<CLI::App*> path;  // the app, then each subcommand named
  bool help_or_version = false;
};

Invocation Scan(CLI::App& app, const std::vector<std::string>& args) {
  Invocation inv;
  inv.path.push_back(&app);
  bool naming_commands = true;  // subcommand names come before their flags
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg == "--config" && i + 1 < args.size()) {
      inv.config = args[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      inv.config = arg.substr(std::strlen("--config="));
    } else if (arg == "--help" || arg == "-h" || arg == "--version") {
      inv.help_or_version = true;
    } else if (CLI::App* sub = naming_commands ? FindSubcommand(inv.path.back(), arg) : nullptr) {
      inv.path.push_back(sub);
    } else {
      naming_commands = false;
    }
  }
  if (inv.config.empty()) {
    if (const char* env = std::getenv(EnvName("config").c_str())) inv.config = env;
  }
  return inv;
}

std::string CommandLine(const std::vector<CLI::App*>& path) {
  std::string line = "outboxd";
  for (size_t i = 1; i < path.size(); ++i) absl::StrAppend(&line, " ", path[i]->get_name());
  return line;
}

// Every option of `app` and its subcommands the file may set, by key.
void CollectKeys(CLI::App* app, std::map<std::string, CLI::Option*>* keys) {
  for (CLI::Option* option : app->get_options()) {
    if (std::string key = ConfigKey(*option); !key.empty()) keys->emplace(key, option);
  }
  for (CLI::App* sub : Subcommands(app)) CollectKeys(sub, keys);
}

// The option `key` sets for the chosen command: its own, or an enclosing app's.
CLI::Option* OptionOf(const std::vector<CLI::App*>& path, const std::string& key) {
  for (auto app = path.rbegin(); app != path.rend(); ++app) {
    for (CLI::Option* option : (*app)->get_options()) {
      if (ConfigKey(*option) == key) return option;
    }
  }
  return nullptr;
}

// One key = value of the file that applies to the chosen command.
struct Setting {
  CLI::Option* option;
  const toml::node* value;
};

class ConfigReader {
 public:
  ConfigReader(std::string file, std::vector<CLI::App*> chosen)
      : file_(std::move(file)), chosen_(std::move(chosen)) {}

  // Checks `table`, the file's part for `scope` (the app or a [command] table), and
  // collects what applies to the chosen command; keys of deeper tables win.
  absl::Status Read(const toml::table& table, const std::vector<CLI::App*>& scope) {
    std::map<std::string, CLI::Option*> known;
    CollectKeys(scope.back(), &known);
    std::vector<std::pair<CLI::App*, const toml::table*>> tables;
    for (auto&& [key, value] : table) {
      const std::string name(key.str());
      CLI::App* sub = FindSubcommand(scope.back(), name);
      if (sub != nullptr && value.is_table()) {
        tables.emplace_back(sub, value.as_table());
      } else if (known.count(name) == 0) {
        return Error(value, absl::StrCat("unknown key \"", name, "\"", Where(scope), "; see ",
                                         CommandLine(Applies(scope) ? chosen_ : scope), " --help"));
      } else if (Applies(scope)) {
        if (CLI::Option* option = OptionOf(chosen_, name)) settings_[name] = {option, &value};
      }
    }
    for (auto [sub, sub_table] : tables) {
      std::vector<CLI::App*> deeper = scope;
      deeper.push_back(sub);
      if (absl::Status s = Read(*sub_table, deeper); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Stores each setting in its flag's variable, as CLI11 would from the command line,
  // then forgets it was given: the command line and the environment still override.
  absl::Status Apply() {
    for (auto& [key, setting] : settings_) {
      std::vector<std::string> values;
      if (absl::Status s = Convert(key, setting, &values); !s.ok()) return s;
      CLI::Option* option = setting.option;
      try {
        option->add_result(values);
        option->run_callback();
      } catch (const CLI::Error& e) {
        option->clear();
        return Error(*setting.value, absl::StrCat(key, ": ", e.what()));
      }
      option->clear();
      option->required(false);
    }
    return absl::OkStatus();
  }

 private:
  // `scope` is the app or a command on the chosen command's path.
  bool Applies(const std::vector<CLI::App*>& scope) const {
    return scope.size() <= chosen_.size() &&
           std::equal(scope.begin(), scope.end(), chosen_.begin());
  }

  static std::string Where(const std::vector<CLI::App*>& scope) {
    if (scope.size() == 1) return "";
    std::vector<std::string> names;
    for (size_t i = 1; i < scope.size(); ++i) names.push_back(scope[i]->get_name());
    return absl::StrCat(" in [", absl::StrJoin(names, "."), "]");
  }

  absl::Status Convert(const std::string& key, const Setting& setting,
                       std::vector<std::string>* values) const {
    const toml::node& v = *setting.value;
    const ConfigType type = ConfigTypeOf(*setting.option);
    // CLI11 would wrap -5 around to 18446744073709551611.
    if (v.is_integer() && *v.value<int64_t>() < 0 &&
        setting.option->get_type_name().rfind("UINT", 0) == 0) {
      return Error(v, absl::StrCat(key, " must not be negative, e.g. ",
                                   Example(key, *setting.option, ConfigType::kInteger)));
    }
    switch (type) {
      case ConfigType::kBoolean:
        if (v.is_boolean()) values->push_back(*v.value<bool>() ? "true" : "false");
        break;
      case ConfigType::kInteger:
        if (v.is_integer()) values->push_back(std::to_string(*v.value<int64_t>()));
        break;
      case ConfigType::kSize:
        if (v.is_integer()) values->push_back(std::to_string(*v.value<int64_t>()));
        if (v.is_string()) values->push_back(*v.value<std::string>());
        break;
      case ConfigType::kNumber:
        if (v.is_number()) values->push_back(std::to_string(*v.value<double>()));
        break;
      case ConfigType::kString:
        if (v.is_string()) values->push_back(*v.value<std::string>());
        break;
      case ConfigType::kStringArray:
        if (v.is_array() && v.as_array()->is_homogeneous(toml::node_type::string)) {
          for (const toml::node& item : *v.as_array())
            values->push_back(*item.value<std::string>());
          return absl::OkStatus();  // [] is allowed: no values
        }
        break;
    }
    if (!values->empty()) return absl::OkStatus();
    return Error(v, absl::StrCat(key, " must be ", Article(type), ConfigTypeName(type), ", e.g. ",
                                 Example(key, *setting.option, type)));
  }

  static std::string Article(ConfigType type) {
    return type == ConfigType::kInteger || type == ConfigType::kSize ||
                   type == ConfigType::kStringArray
               ? "an "
               : "a ";
  }

  static std::string Example(const std::string& key, const CLI::Option& option, ConfigType type) {
    std::string value = option.get_default_str();
    switch (type) {
      case ConfigType::kBoolean:
        return key + " = true";
      case ConfigType::kInteger:
      case ConfigType::kNumber: {
        // A default told in words ("100000; 10000 with --sink rabbitmq"): its number.
        const std::string number = value.substr(0, value.find_first_not_of("0123456789.-"));
        return absl::StrCat(key, " = ", number.empty() ? "1" : number);
      }
      case ConfigType::kSize:
        return absl::StrCat(key, " = \"", value.empty() ? "64MiB" : value, "\"");
      case ConfigType::kString:
        return absl::StrCat(key, " = \"", value.empty() ? "..." : value, "\"");
      case ConfigType::kStringArray:
        return key + " = [\"...\", \"...\"]";
    }
    return key;
  }

  absl::Status Error(const toml::node& at, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ":", at.source().begin.line, ": ", message));
  }

  std::string file_;
  std::vector<CLI::App*> chosen_;
  std::map<std::string, Setting> settings_;
};

}  // namespace

ConfigType ConfigTypeOf(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return ConfigType::kBoolean;  // a switch
  if (option.get_items_expected_max() > 1) return ConfigType::kStringArray;
  const std::string type = option.get_type_name();
  if (type.find("SIZE") != std::string::npos) return ConfigType::kSize;
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) return ConfigType::kInteger;
  if (type.rfind("FLOAT", 0) == 0) return ConfigType::kNumber;
  return ConfigType::kString;
}

const char* ConfigTypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kBoolean:
      return "boolean";
    case ConfigType::kInteger:
      return "integer";
    case ConfigType::kSize:
      return "integer or string";
    case ConfigType::kNumber:
      return "number";
    case ConfigType::kString:
      return "string";
    case ConfigType::kStringArray:
      return "array of strings";
  }
  return "";
}

std::string ConfigKey(const CLI::Option& option) {
  if (option.get_lnames().empty()) return "";
  const std::string& name = option.get_lnames().front();
  return name == "config" || name == "help" || name == "version" ? "" : name;
}

void AddConfigFlags(CLI::App& app) {
  if (TakesFlags(&app)) {
    app.add_option("--config", "TOML file with defaults for these flags (docs/configuration.md)")
        ->envname(EnvName("config"))
        ->type_name("FILE");
    return;
  }
  for (CLI::App* sub : Subcommands(&app)) AddConfigFlags(*sub);
}

absl::Status LoadConfigFile(CLI::App& app, const std::vector<std::string>& args) {
  Invocation inv = Scan(app, args);
  if (inv.config.empty() || inv.help_or_version || !TakesFlags(inv.path.back())) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> text = ReadFile(inv.config);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read config file ", inv.config, ": ",
                                                   text.status().message(),
                                                   "; check --config/OUTBOXD_CONFIG"));
  }
  toml::parse_result parsed = toml::parse(*text, inv.config);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    return absl::InvalidArgumentError(absl::StrCat(inv.config, ":", e.source().begin.line, ": ",
                                                   std::string(e.description()),
                                                   " (not valid TOML)"));
  }
  ConfigReader reader(inv.config, inv.path);
  if (absl::Status s = reader.Read(parsed.table(), {&app}); !s.ok()) return s;
  return reader.Apply();
}

}  // namespace outboxd::cli
