"""The HTML report's inline stylesheet and script (no web fonts, no CDN, nothing fetched).

The script only adds interaction (a trial row and its point highlight each other) and checks
that every plot was laid out, recording the result in ``<body data-rendered=...>`` for tests."""

from __future__ import annotations

CSS = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#d9e2ec; --bg:#f5f7fa; --card:#fff; --ok:#2563eb;
  --bad:#dc2626; --win:#16a34a; --def:#52606d; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--fg); background:var(--bg); }
header { padding:18px 28px 10px; background:var(--card); border-bottom:1px solid var(--line); }
h1 { margin:0 0 2px; font-size:20px; }
h2 { margin:0 0 6px; font-size:16px; display:flex; align-items:center; gap:10px; }
.meta { color:var(--muted); margin:0 0 6px; font-size:13px; }
nav { display:flex; flex-wrap:wrap; gap:6px 14px; font-size:13px; }
nav a, td a { color:var(--ok); text-decoration:none; }
main { max-width:1120px; margin:0 auto; padding:18px 20px 40px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:16px 18px;
  margin:0 0 18px; }
table code { white-space:normal; overflow-wrap:anywhere; }  /* long routes wrap inside their cell */
td { overflow-wrap:anywhere; }
code { font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; }
table { border-collapse:collapse; width:100%; margin-top:10px; font-size:13px; }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; }
td.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
tr.winner td { background:#ecfdf3; }
tr.failed td { color:#7b8794; }
tr.hl td { background:#fff7d6 !important; }
.mark { color:var(--win); font-size:11px; text-transform:uppercase; margin-left:6px; }
.badge { white-space:nowrap; font-size:12px; font-weight:600; padding:1px 8px; border-radius:10px;
  background:#e4e7eb; color:var(--def); }
.badge.tuned { background:#dcfce7; color:#166534; }
.badge.none { background:#fde8e8; color:#9b1c1c; }
ul.decision { margin:6px 0 10px; padding-left:18px; }
ul.decision li:first-child { font-weight:600; }
.charts { display:grid; grid-template-columns:repeat(auto-fit,minmax(480px,1fr)); gap:12px; }
figure { margin:0; }
figcaption { font-weight:600; font-size:13px; margin-bottom:4px; }
svg.plot { max-width:100%; height:auto; display:block; font-size:11px; }
svg .grid { stroke:#edf0f3; }
svg .frame { fill:none; stroke:var(--line); }
svg .tick, svg .axis, svg .caption { fill:var(--muted); }
svg .caption { font-size:11px; }
svg .label { fill:var(--fg); font-size:12px; } svg .label.small { font-size:11px; }
svg .value, svg .note { fill:var(--fg); font-size:11px; }
svg .note { fill:var(--muted); font-style:italic; }
svg .value.strong { font-weight:600; } svg .value.faster { fill:#166534; } svg .value.slower { fill:#9b1c1c; }
svg .unity { stroke:var(--def); stroke-dasharray:3 3; }
svg .bar.tuned { fill:#4ade80; } svg .bar.default { fill:#cbd2d9; }
svg .whisker { stroke:#14532d; stroke-width:1.3; }
svg .fail-zone { fill:#fdecec; }
svg .threshold { stroke:var(--bad); stroke-width:1.5; stroke-dasharray:6 4; }
svg .threshold-label { fill:var(--bad); font-size:11px; }
svg .default-line { stroke:var(--def); stroke-dasharray:2 3; }
svg .default-label { fill:var(--def); font-size:10px; }
svg .point circle, svg .point rect { stroke:#fff; stroke-width:1; }
svg .point .ci { stroke:currentColor; stroke-width:1; opacity:.55; }
svg .point.eligible { color:var(--ok); fill:var(--ok); }
svg .point.failed { color:var(--bad); fill:var(--bad); }
svg .point.winner { color:var(--win); fill:var(--win); }
svg .point.other { color:#9aa5b1; fill:#9aa5b1; }
svg .point.winner circle { stroke:#14532d; stroke-width:2; }
svg .point.default rect { stroke:#1f2933; stroke-width:1.5; }
svg .point:hover, svg .point.hl { filter:drop-shadow(0 0 3px #f59e0b); }
svg .point.hl circle, svg .point.hl rect { stroke:#f59e0b; stroke-width:2.5; }
svg .winner-label { fill:#166534; font-weight:600; font-size:11px; paint-order:stroke; stroke:#fff; stroke-width:3px; }
svg .effect.faster { fill:#4ade80; } svg .effect.slower { fill:#fca5a5; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; font-size:12px; color:var(--muted); margin-top:4px; }
.legend i { display:inline-block; width:10px; height:10px; margin-right:5px; vertical-align:-1px; }
.legend .dot { border-radius:50%; } .legend .dot.eligible { background:var(--ok); }
.legend .dot.failed { background:var(--bad); } .legend .dot.other { background:#9aa5b1; }
.legend .dot.winner { background:var(--win); }
.legend .sq { border:1.5px solid #1f2933; background:var(--ok); }
.legend .thr { width:14px; height:0; border-top:2px dashed var(--bad); vertical-align:3px; }
.note, .unplotted { color:var(--muted); font-size:13px; }
details { margin-top:10px; } summary { cursor:pointer; color:var(--ok); font-size:13px; }
@media print { body { background:#fff; } section { break-inside:avoid; } details { display:block; } }
"""

JS = """
(function () {
  'use strict';
  function link(section) {
    var rows = section.querySelectorAll('tr[data-route]');
    var points = section.querySelectorAll('svg .point[data-route]');
    function toggle(route, on) {
      [rows, points].forEach(function (list) {
        Array.prototype.forEach.call(list, function (el) {
          if (el.getAttribute('data-route') === route) { el.classList.toggle('hl', on); }
        });
      });
    }
    Array.prototype.forEach.call(rows, function (el) {
      el.addEventListener('mouseenter', function () { toggle(el.getAttribute('data-route'), true); });
      el.addEventListener('mouseleave', function () { toggle(el.getAttribute('data-route'), false); });
    });
    Array.prototype.forEach.call(points, function (el) {
      el.addEventListener('mouseenter', function () { toggle(el.getAttribute('data-route'), true); });
      el.addEventListener('mouseleave', function () { toggle(el.getAttribute('data-route'), false); });
      el.addEventListener('click', function () {
        var details = section.querySelector('details');
        if (details) { details.open = true; }
        var row = section.querySelector('tr[data-route="' + CSS.escape(el.getAttribute('data-route')) + '"]');
        if (row) { row.scrollIntoView({block: 'center'}); }
      });
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll('section.job'), link);
  // Check that every plot was laid out: its marks have a size on screen.
  var plots = document.querySelectorAll('svg.plot');
  var drawn = 0, marks = 0;
  Array.prototype.forEach.call(plots, function (svg) {
    var box = svg.getBoundingClientRect();
    var shapes = svg.querySelectorAll('.point, rect.bar, rect.effect, line.threshold');
    var sized = Array.prototype.filter.call(shapes, function (el) {
      var b = el.getBBox(); return b.width > 0 || b.height > 0;
    });
    if (box.width > 0 && box.height > 0 && sized.length > 0) { drawn += 1; }
    marks += sized.length;
  });
  document.body.setAttribute('data-plots', String(plots.length));
  document.body.setAttribute('data-plots-drawn', String(drawn));
  document.body.setAttribute('data-marks', String(marks));
  document.body.setAttribute('data-rendered', drawn === plots.length ? 'ok' : 'partial');
  // Check that no table spills past its card (the summary table used to, at 1400 and 1920 px).
  var spills = 0;
  Array.prototype.forEach.call(document.querySelectorAll('section'), function (card) {
    var edge = card.getBoundingClientRect().right;
    Array.prototype.forEach.call(card.querySelectorAll('table'), function (t) {
      if (t.getBoundingClientRect().right > edge + 1) { spills += 1; }
    });
  });
  document.body.setAttribute('data-spills', String(spills));
  document.body.setAttribute('data-width', String(window.innerWidth));
})();
"""
