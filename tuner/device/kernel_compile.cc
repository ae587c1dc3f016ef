#include "tuner/device/kernel_compile.h"

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

// The value of a parameter as C++ source text (a macro body or a template
// argument).
std::string SourceText(const Value& v, bool template_argument) {
  if (const bool* b = std::get_if<bool>(&v)) {
    return template_argument ? (*b ? "true" : "false") : (*b ? "1" : "0");
  }
  return FormatValue(v);
}

std::string Relative(const std::string& path, const std::string& base_dir) {
  return path.empty() || path[0] == '/' ? path : StrCat(base_dir, "/", path);
}

}  // namespace

absl::StatusOr<std::string> KernelSource(const v1::Kernel& kernel, const std::string& base_dir,
                                         const std::string& field) {
  if (kernel.source_case() == v1::Kernel::kFile) {
    absl::StatusOr<std::string> text = ReadFileContents(Relative(kernel.file(), base_dir));
    if (!text.ok()) {
      return absl::InvalidArgumentError(StrCat(field, ".file: ", text.status().message()));
    }
    return text;
  }
  if (kernel.code().empty()) {
    return absl::InvalidArgumentError(StrCat(field, ": needs its source (code or file)"));
  }
  return kernel.code();
}

v1::CompileRequest KernelCompileRequest(
    const v1::Kernel& kernel, const std::string& source, const std::string& source_name,
    const std::string& base_dir, const std::vector<std::pair<std::string, std::string>>& macros,
    const std::string& expression, const std::string& arch) {
  v1::CompileRequest req;
  req.set_source_name(source_name);
  req.set_architecture(arch);
  req.set_is_name_expression(true);
  bool has_std = false;
  for (const std::string& o : kernel.compiler_options()) {
    req.add_options(o);
    has_std = has_std || o.rfind("-std", 0) == 0 || o.rfind("--std", 0) == 0;
  }
  if (!has_std) req.add_options("--std=c++17");
  for (const std::string& inc : kernel.include_paths()) {
    req.add_options(StrCat("-I", Relative(inc, base_dir)));
  }
  std::string prelude;
  for (const auto& [macro, value] : kernel.defines()) {
    prelude += StrCat("#define ", macro, " ", value, "\n");
  }
  for (const auto& [macro, value] : macros) prelude += StrCat("#define ", macro, " ", value, "\n");
  req.set_source(prelude.empty() ? source
                                 : StrCat(prelude, "#line 1 \"", source_name, "\"\n", source));
  req.set_kernel_expression(expression);
  return req;
}

v1::CompileRequest BuildCompileRequest(const v1::JobSpec& spec, const std::string& source,
                                       const std::string& base_dir, const Space& space,
                                       const Config& config, const std::string& arch) {
  const v1::Kernel& k = spec.kernel();
  const bool templated = k.parameter_passing() == v1::Kernel::TEMPLATE;
  std::string expression = templated ? k.name_expression() : k.name();
  std::vector<std::pair<std::string, std::string>> macros;
  for (std::size_t i = 0; i < space.num_params(); ++i) {
    const Parameter& p = space.param(i);
    const Value& v = space.ValueOf(config, i);
    if (templated) {
      const std::string token = StrCat("{", p.name, "}");
      for (std::size_t pos = expression.find(token); pos != std::string::npos;
           pos = expression.find(token, pos)) {
        const std::string text = SourceText(v, true);
        expression.replace(pos, token.size(), text);
        pos += text.size();
      }
    } else {
      macros.emplace_back(p.name, SourceText(v, false));
    }
  }
  return KernelCompileRequest(k, source,
                              k.source_case() == v1::Kernel::kFile ? k.file() : "kernel.cu",
                              base_dir, macros, expression, arch);
}

}  // namespace ktune
