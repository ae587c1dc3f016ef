// The dashboard's files, inside the binary (GPU nodes often have no
// network): the page, its script and styles, and Chart.js (from the npm
// registry at build time: server/web/package.json). ktuned serves them;
// ktune report and ktune evaluate --html inline them into one file.
#ifndef KTUNE_SERVER_WEB_ASSETS_H_
#define KTUNE_SERVER_WEB_ASSETS_H_

#include <string>
#include <string_view>

namespace ktune {

extern const char kWebIndexHtml[];
extern const char kWebDashboardJs[];
extern const char kWebDashboardCss[];
extern const char kWebChartJs[];

// The live dashboard's page (it loads the others from /static/).
std::string DashboardPage();

// One HTML file that shows `data_json` with nothing to fetch: the styles,
// Chart.js and the dashboard's script inline, `data_json` (an object with
// "kind": "job" and "job": a ktune.v1.Job with its measurements, or
// "kind": "evaluation") embedded as JSON.
std::string SelfContainedPage(std::string_view title, std::string_view data_json);

}  // namespace ktune

#endif  // KTUNE_SERVER_WEB_ASSETS_H_
