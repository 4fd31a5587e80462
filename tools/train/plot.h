// gpipe_train --plot=FILE.svg: the run's metrics as one self-contained SVG
// picture, a panel per series stacked over a shared step axis (loss,
// learning rate, throughput per step; the evaluation metrics at the steps
// they were taken), so a run can be looked at without another tool.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpipe::train {

struct PlotSeries {
  std::string name;                               // the panel's title, e.g. "loss"
  std::vector<std::pair<double, double>> points;  // (step, value); non-finite values are gaps
  bool markers = false;                           // dots at the points (sparse series)
};

// Panels in the given order; an empty series gets an empty panel saying so.
std::string metrics_svg(const std::string& title, const std::vector<PlotSeries>& series);

}  // namespace gpipe::train
