#include "report/report_html.h"

#include <fmt/format.h>

namespace mtrain::report {

namespace {

// args.json keys shown in the table, in this order (absent ones are left out).
constexpr const char* kKeyArgs[] = {"command",
                                    "model_preset",
                                    "model",
                                    "num_layers",
                                    "hidden_size",
                                    "num_attention_heads",
                                    "num_query_groups",
                                    "ffn_hidden_size",
                                    "vocab_size",
                                    "seq_length",
                                    "max_length",
                                    "train_type",
                                    "dataset",
                                    "data_path",
                                    "micro_batch_size",
                                    "global_batch_size",
                                    "train_iters",
                                    "lr",
                                    "min_lr",
                                    "lr_decay_style",
                                    "lr_warmup_iters",
                                    "lr_warmup_fraction",
                                    "weight_decay",
                                    "clip_grad",
                                    "seed",
                                    "tensor_model_parallel_size",
                                    "pipeline_model_parallel_size",
                                    "context_parallel_size",
                                    "expert_model_parallel_size",
                                    "sequence_parallel",
                                    "data_parallel_size",
                                    "world_size",
                                    "bf16",
                                    "fp16",
                                    "recompute_granularity",
                                    "device_profile",
                                    "output_dir"};

constexpr const char* kStyle = R"(
body{font-family:sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
tr.differs td{background:#fff3cd}.warn{color:#a15c00}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plot-box{border:1px solid #ddd;padding:6px}
.plot-box label{font-size:13px}
)";

// Records JavaScript errors where --dump-dom can read them; first in <head>.
constexpr const char* kErrorScript = R"(
(function(){var root=document.documentElement,errs=[];
function note(m){errs.push(String(m));root.setAttribute('data-js-errors',errs.join(' | '));}
window.addEventListener('error',function(e){note(e.message||'error');});
window.addEventListener('unhandledrejection',function(e){note('unhandled rejection: '+e.reason);});
var ce=console.error;console.error=function(){note([].join.call(arguments,' '));ce.apply(console,arguments);};})();
)";

// Log-scale switch, hover values, and the rendering record the test reads.
constexpr const char* kScript = R"(
(function(){
function show(box,log){box.querySelector('.lin').style.display=log?'none':'';
 box.querySelector('.log').style.display=log?'':'none';measure(box);}
function fmtv(v){var a=Math.abs(v);return (a>=1e5||(a>0&&a<1e-3))?v.toExponential(3):String(+v.toPrecision(5));}
function measure(scope){scope.querySelectorAll('svg.plot').forEach(function(svg){
 if(svg.getBoundingClientRect().width===0)return;
 svg.querySelectorAll('path.series').forEach(function(p){var b=p.getBBox();
  p.setAttribute('data-rendered-length',p.getTotalLength().toFixed(1));
  p.setAttribute('data-rendered-box',b.width.toFixed(1)+'x'+b.height.toFixed(1));});
 var r=svg.getBoundingClientRect();
 svg.setAttribute('data-rendered-rect',[r.left+scrollX,r.top+scrollY,r.width,r.height].map(Math.round).join(','));});}
function hover(svg){var d=svg.dataset,text=svg.querySelector('text.hover');
 var series=[].map.call(svg.querySelectorAll('path.series'),function(p){return {label:p.dataset.label,
  x:p.dataset.x.split(',').map(Number),y:p.dataset.y.split(',').map(Number)};});
 function showAt(it){var parts=[];
  series.forEach(function(s){var best=-1,bd=Infinity;s.x.forEach(function(x,i){var dd=Math.abs(x-it);
   if(dd<bd&&isFinite(s.y[i])){bd=dd;best=i;}});
   if(best>=0)parts.push(s.label+': '+fmtv(s.y[best])+' @ '+s.x[best]);});
  text.textContent=parts.join('   ');}
 svg.addEventListener('mousemove',function(ev){var r=svg.getBoundingClientRect(),vb=svg.viewBox.baseVal;
  var px=(ev.clientX-r.left)*vb.width/r.width;
  showAt(+d.xlo+(px-d.px0)/(d.px1-d.px0)*(d.xhi-d.xlo));});
 svg.addEventListener('mouseleave',function(){text.textContent='';});
 var m=/hover=([0-9.]+)/.exec(location.hash);if(m)showAt(+m[1]);}
document.querySelectorAll('input.logtoggle').forEach(function(cb){var box=document.getElementById('plot-'+cb.dataset.plot);
 cb.addEventListener('change',function(){show(box,cb.checked);});
 if(/(^#|,)log(,|$)/.test(location.hash)){cb.checked=true;show(box,true);}});
document.querySelectorAll('svg.plot').forEach(hover);
measure(document);
document.documentElement.setAttribute('data-report-ready','1');
})();
)";

std::string precision_of(const nlohmann::json& args) {
  if (arg_text(args, "bf16") == "true") return "bf16";
  if (arg_text(args, "fp16") == "true") return "fp16";
  return "fp32";
}

std::string status_of(const RunLog& run) {
  const TrainRow& last = run.train.back();
  std::string s = fmt::format("{} logged steps, {} validation; ", run.train.size(), run.eval.size());
  if (last.train_iters > 0 && last.iteration >= last.train_iters)
    s += fmt::format("finished ({} iterations)", last.train_iters);
  else
    s += fmt::format("at iteration {} of {} (still running, or stopped)", last.iteration,
                     last.train_iters > 0 ? std::to_string(last.train_iters) : "?");
  if (run.truncated_lines) s += "; an unfinished last line of logging.jsonl was skipped";
  return s;
}

std::string runs_section(const std::vector<RunLog>& runs) {
  std::string s = "<h2>Runs</h2><ul class=\"runs\">";
  for (const RunLog& run : runs) {
    s += fmt::format("<li><b>{}</b> ({}): {}. Layout: {}</li>", xml_escape(run.label), xml_escape(run.dir),
                     xml_escape(status_of(run)), xml_escape(layout_summary(run)));
    for (const std::string& w : run.warnings) s += fmt::format("<li class=\"warn\">{}</li>", xml_escape(w));
  }
  return s + "</ul>";
}

// One row per key argument, one column per run; rows where runs differ are marked.
std::string args_table(const std::vector<RunLog>& runs) {
  std::string s = "<h2>Key arguments</h2><table class=\"args\"><tr><th>argument</th>";
  for (const RunLog& run : runs) s += fmt::format("<th>{}</th>", xml_escape(run.label));
  s += "</tr>";
  for (const char* key : kKeyArgs) {
    std::vector<std::string> values;
    bool any = false, differs = false;
    for (const RunLog& run : runs) {
      values.push_back(arg_text(run.args, key));
      any = any || !values.back().empty();
      differs = differs || values.back() != values.front();
    }
    if (!any) continue;
    s += fmt::format("<tr{}><td>{}</td>", differs ? " class=\"differs\"" : "", key);
    for (const std::string& v : values) s += fmt::format("<td>{}</td>", xml_escape(v));
    s += "</tr>";
  }
  return s + "</table>";
}

std::string plot_box(const Plot& p) {
  std::string s = fmt::format("<section class=\"plot-box\" id=\"plot-{}\">", xml_escape(p.id));
  if (p.log_toggle)
    s += fmt::format("<label><input type=\"checkbox\" class=\"logtoggle\" data-plot=\"{}\"> log scale</label>",
                     xml_escape(p.id));
  s += "<div class=\"lin\">" + render_svg(p, false) + "</div>";
  if (p.log_toggle) s += "<div class=\"log\" style=\"display:none\">" + render_svg(p, true) + "</div>";
  return s + "</section>";
}

}  // namespace

std::string layout_summary(const RunLog& run) {
  const auto get = [&](const char* key) {
    const std::string v = arg_text(run.args, key);
    return v.empty() ? std::string("?") : v;
  };
  if (!run.args.is_object()) return "unknown (no args.json)";
  return fmt::format("TP {} · PP {} · CP {} · EP {} · DP {} ({} ranks) · {}", get("tensor_model_parallel_size"),
                     get("pipeline_model_parallel_size"), get("context_parallel_size"),
                     get("expert_model_parallel_size"), get("data_parallel_size"), get("world_size"),
                     precision_of(run.args));
}

std::string render_report_html(const std::vector<RunLog>& runs, const std::vector<Plot>& plots) {
  std::string title = "mtrain report: " + runs.front().label;
  for (size_t i = 1; i < runs.size(); ++i) title += " vs " + runs[i].label;
  std::string s = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style>"
      "<script>{}</script></head><body>\n<h1>{}</h1>\n",
      xml_escape(title), kStyle, kErrorScript, xml_escape(title));
  s += runs_section(runs) + "\n<h2>Plots</h2><div class=\"plots\">\n";
  for (const Plot& p : plots) s += plot_box(p) + "\n";
  s += "</div>\n" + args_table(runs);
  s += fmt::format("\n<script>{}</script>\n</body></html>\n", kScript);
  return s;
}

}  // namespace mtrain::report
