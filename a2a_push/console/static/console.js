// The delivery console's only script: refreshes the overview every 5 s. The pages work
// without it (server-rendered); it adds nothing else. No third-party code.
"use strict";

(function () {
  var overview = document.getElementById("overview");
  if (!overview) return;
  var source = overview.getAttribute("data-src");
  var svgNS = "http://www.w3.org/2000/svg";

  function text(name, value) {
    var nodes = document.querySelectorAll('[data-field="' + name + '"]');
    for (var i = 0; i < nodes.length; i++) {
      var target = nodes[i].querySelector("a") || nodes[i];
      target.textContent = value;
    }
  }

  function duration(seconds) {
    if (seconds === null) return "none";
    if (seconds < 90) return Math.round(seconds) + " s";
    if (seconds < 5400) return Math.round(seconds / 60) + " min";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
    return (seconds / 86400).toFixed(1) + " days";
  }

  function bar(svg, cls, x, y, w, hgt, title) {
    var rect = document.createElementNS(svgNS, "rect");
    rect.setAttribute("class", cls);
    rect.setAttribute("x", x.toFixed(1));
    rect.setAttribute("y", y.toFixed(1));
    rect.setAttribute("width", w.toFixed(1));
    rect.setAttribute("height", hgt.toFixed(1));
    var t = document.createElementNS(svgNS, "title");
    t.textContent = title;
    rect.appendChild(t);
    svg.appendChild(rect);
  }

  function chart(series) {
    var svg = document.getElementById("chart");
    if (!svg) return;
    var width = 720, height = 160, mid = 110;
    var rects = svg.querySelectorAll("rect");
    for (var i = 0; i < rects.length; i++) rects[i].remove();
    var top = 1, bottom = 1, ok = 0, failed = 0;
    series.forEach(function (s) {
      top = Math.max(top, s.delivered); bottom = Math.max(bottom, s.failed);
      ok += s.delivered; failed += s.failed;
    });
    var w = width / Math.max(series.length, 1);
    series.forEach(function (s, i) {
      var label = new Date(s.at * 1000).toISOString().slice(11, 16);
      var up = (mid - 10) * s.delivered / top, down = (height - mid - 10) * s.failed / bottom;
      if (up) bar(svg, "ok", i * w, mid - up, w * 0.8, up, label + ": " + s.delivered + " delivered");
      if (down) bar(svg, "fail", i * w, mid, w * 0.8, down, label + ": " + s.failed + " failed");
    });
    text("delivered", ok + " delivered");
    text("failed", failed + " failed attempts");
  }

  function refresh() {
    fetch(source, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        ["pending", "due", "inFlight", "dead", "disabledConfigs"].forEach(function (name) {
          text(name, String(data[name]));
        });
        text("openBreakers", data.openBreakers === null ? "unknown" : String(data.openBreakers.length));
        text("oldestPendingAge", duration(data.oldestPendingAge));
        chart(data.series);
        overview.setAttribute("data-refreshed", String(data.at));
      })
      .catch(function () { /* the next tick tries again */ });
  }

  setInterval(refresh, 5000);
})();
