#include "server/web/assets.h"

#include "tuner/base/strings.h"

namespace ktune {
namespace {

std::string HtmlEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside a <script> element: "</" would end the element early, and
// "<\/" means the same in a JSON string.
std::string ScriptSafe(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    out += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') out += '\\';
  }
  return out;
}

}  // namespace

std::string DashboardPage() { return kWebIndexHtml; }

std::string SelfContainedPage(std::string_view title, std::string_view data_json) {
  return StrCat("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
                "<title>", HtmlEscape(title), "</title>\n<style>\n", kWebDashboardCss,
                "</style>\n</head>\n<body data-mode=\"report\">\n<div id=\"app\"></div>\n",
                "<script type=\"application/json\" id=\"ktune-data\">", ScriptSafe(data_json),
                "</script>\n<script>\n", kWebChartJs, "\n</script>\n<script>\n", kWebDashboardJs,
                "\n</script>\n</body>\n</html>\n");
}

}  // namespace ktune
