"""The timeline as ONE self-contained HTML file: inline SVG, a little inline JS, no network access.

Every bar and marker carries its hover text in an SVG ``<title>`` (the browser's own tooltip
without JavaScript; the script turns it into a styled tooltip) and its times (``data-s``/``data-e``
or ``data-t``, seconds since the first arrival). The script adds a tooltip that follows the mouse,
a task/agent filter that re-stacks the visible lanes, and an x-zoom (from/to seconds) that
re-scales every element from those data attributes — enough to read runs with hundreds of tasks in a browser.
"""

from __future__ import annotations

import html
import math

from timely_llm_ros.lrtrace.timeline_model import SPAN_KINDS
from timely_llm_ros.viz import style
from timely_llm_ros.viz.layout import Layout, lane_summary

PITCH = 18  # px per lane
LEFT = 170  # label column
PLOT_W = 1100
RIGHT = 110  # group label column
TOP = 56  # legend + axis
BOTTOM = 30


def _a(text: str) -> str:
    return html.escape(text, quote=True)


def render_html(layout: Layout, title: str, notes: list[str] | None = None) -> str:
    t0 = layout.t0
    x0, x1 = layout.x_range[0] - t0, layout.x_range[1] - t0
    span = (x1 - x0) or 1.0

    def px(t_rel: float) -> float:
        return LEFT + (t_rel - x0) / span * PLOT_W

    def clamp(a: float, b: float) -> tuple[float, float]:
        """Bar extent cut to the plot (renderers without clipPath support draw nothing outside)."""
        lo, hi = max(px(a), LEFT), min(px(b), LEFT + PLOT_W)
        return lo, (max(hi - lo, 0.5) if hi >= lo else 0.0)

    def hidden(t_rel: float) -> str:
        return "" if LEFT <= px(t_rel) <= LEFT + PLOT_W else ' display="none"'

    lanes = []
    prev_group = None
    for row in layout.rows:
        lane = row.lane
        parts = []
        first = row.group != prev_group
        prev_group = row.group
        if row.group:  # group label + separator, shown on the first visible lane of each group
            show = "" if first else ' display="none"'
            sep = "" if first and row.y > 0 else ' display="none"'
            label = f"agent {row.group}" if layout.group_by == "agent" else row.group
            parts.append(
                f'<line class="gsep"{sep} x1="0" x2="{LEFT + PLOT_W + RIGHT}" y1="0" y2="0" stroke="#999" '
                f'stroke-dasharray="4,3"/><text class="grp"{show} x="{LEFT + PLOT_W + 6}" y="{PITCH - 5}">'
                f"{_a(label)}</text>"
            )
        if lane.urgent:
            parts.append(
                f'<rect class="band" x="{LEFT}" y="0" width="{PLOT_W}" height="{PITCH}" '
                f'fill="{style.URGENT_BAND}"/>'
            )
        for b in row.bars:
            s, e = b.start - t0, b.end - t0
            y = PITCH / 2 + 1 if b.robot_side else 2
            tip = _a(b.tip)
            bx, bw = clamp(s, e)
            parts.append(
                f'<rect class="bar k-{b.kind}" data-kind="{b.kind}" data-seg="{b.seg}" data-s="{s:.6f}" '
                f'data-e="{e:.6f}" x="{bx:.2f}" y="{y}" width="{bw:.2f}" '
                f'height="{PITCH / 2 - 3}" fill="{style.SPAN_COLORS[b.kind]}">'
                f"<title>{tip}</title></rect>"
            )
        for m in row.markers:
            t = m.t - t0
            tip = _a(m.tip)
            if m.kind == "arrival":
                parts.append(
                    f'<path class="mk arrival" data-kind="arrival" data-t="{t:.6f}"{hidden(t)} '
                    f'd="M{px(t):.2f},1 l6,4 l-6,4 z" fill="{style.ARRIVAL_COLOR}">'
                    f"<title>{tip}</title></path>"
                )
            elif m.kind in ("ert", "ert_missed"):
                color = style.MISSED_COLOR if m.kind == "ert_missed" else style.ERT_COLOR
                width = 3 if m.kind == "ert_missed" else 2
                parts.append(
                    f'<line class="mk {m.kind}" data-kind="{m.kind}" data-t="{t:.6f}"{hidden(t)} '
                    f'x1="{px(t):.2f}" x2="{px(t):.2f}" y1="0" y2="{PITCH}" stroke="{color}" '
                    f'stroke-width="{width}"><title>{tip}</title></line>'
                )
            else:
                parts.append(
                    f'<g><title>{tip}</title><text class="mk terminal" data-kind="terminal" data-t="{t:.6f}"'
                    f'{hidden(t)} x="{px(t):.2f}" y="{PITCH - 4}" text-anchor="middle" '
                    f'fill="{style.FAILED_COLOR}" font-size="13" font-weight="bold">✕</text></g>'
                )
        parts = ['<g clip-path="url(#lc)">', *parts, "</g>"]
        label_color = style.URGENT_TEXT if lane.urgent else "#222"
        weight = "bold" if lane.urgent else "normal"
        summary = _a(
            f"task {lane.task_id}, agent {lane.agent_id or '?'}, {lane.klass or 'class ?'}: "
            f"{lane_summary(lane)}" + (f" ({lane.reason})" if lane.reason else "")
        )
        parts.append(
            f'<g><title>{summary}</title><text class="lbl" x="{LEFT - 6}" y="{PITCH - 5}" text-anchor="end" '
            f'fill="{label_color}" font-weight="{weight}">{_a(lane.task_id)}</text></g>'
        )
        lanes.append(
            f'<g class="lane" id="lane-{_a(lane.task_id)}" data-task="{_a(lane.task_id)}" '
            f'data-agent="{_a(lane.agent_id)}" data-group="{_a(row.group)}" data-urgent="{int(lane.urgent)}" '
            f'transform="translate(0,{TOP + row.y * PITCH})">{"".join(parts)}</g>'
        )
    height = TOP + max(len(layout.rows), 1) * PITCH + BOTTOM
    width = LEFT + PLOT_W + RIGHT
    legend = []
    lx: float = LEFT
    for k in SPAN_KINDS:
        legend.append(
            f'<rect x="{lx}" y="8" width="12" height="10" fill="{style.SPAN_COLORS[k]}"/>'
            f'<text x="{lx + 16}" y="17">{_a(style.SPAN_LABELS[k])}</text>'
        )
        lx += 30 + 6.6 * len(style.SPAN_LABELS[k])  # ~6 px per character at 11 px
    legend.append(
        f'<line x1="{LEFT}" x2="{LEFT}" y1="24" y2="36" stroke="{style.ERT_COLOR}" stroke-width="2"/>'
        f'<text x="{LEFT + 6}" y="34">ERT</text>'
        f'<line x1="{LEFT + 50}" x2="{LEFT + 50}" y1="24" y2="36" stroke="{style.MISSED_COLOR}" '
        f'stroke-width="3"/><text x="{LEFT + 56}" y="34">ERT missed</text>'
        f'<text x="{LEFT + 140}" y="35" fill="{style.FAILED_COLOR}" font-weight="bold">✕</text>'
        f'<text x="{LEFT + 154}" y="34">failed / expired / cancelled</text>'
        f'<rect x="{LEFT + 270}" y="25" width="12" height="10" fill="{style.URGENT_BAND}" stroke="#ddd"/>'
        f'<text x="{LEFT + 286}" y="34">urgent task</text>'
    )
    axis = _axis(x0, x1, px, height)
    foot = [layout.note()] if layout.note() else []
    foot += list(notes or [])
    notes_html = "".join(f"<li>{_a(n)}</li>" for n in foot)
    return _PAGE.format(
        title=_a(title),
        width=width,
        height=height,
        legend="".join(legend),
        lanes="".join(lanes),
        notes=f'<ul class="notes">{notes_html}</ul>' if notes_html else "",
        x0=_num(x0),
        x1=_num(x1),
        left=LEFT,
        plot_w=PLOT_W,
        top=TOP,
        pitch=PITCH,
        right=RIGHT,
        pitch_clip=PITCH + 4,
        n_rows=len(layout.rows),
        axis=axis,
    )


def _axis(x0: float, x1: float, px, height: int) -> str:
    """Grid lines and second labels (the script redraws them on zoom; this is the no-JS view)."""
    span = (x1 - x0) or 1.0
    step = 10 ** math.floor(math.log10(span / 8))
    if span / step > 16:
        step *= 5
    elif span / step > 8:
        step *= 2
    out = []
    h = height - 22
    t = math.ceil(x0 / step) * step
    while t <= x1 + 1e-9:
        x = px(t)
        out.append(
            f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{TOP - 6}" y2="{h}" stroke="#e4e4e4"/>'
            f'<text x="{x:.2f}" y="{h + 14}" text-anchor="middle">{round(t, 6):g} s</text>'
        )
        t += step
    return "".join(out)


def _num(x: float) -> str:
    return f"{x:.6f}" if math.isfinite(x) else "0"


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{font-family:sans-serif;margin:12px;color:#222}} h1{{font-size:16px}}
svg text{{font-size:11px}} .lane:hover .lbl{{text-decoration:underline}}
#tip{{position:fixed;display:none;background:#fffbe6;border:1px solid #999;padding:4px 6px;font-size:12px;
max-width:520px;pointer-events:none;white-space:normal;z-index:10}}
.ctl{{margin:6px 0;font-size:13px}} .ctl input{{margin-right:10px}} .notes{{color:#7f0000;font-size:12px}}
</style></head><body>
<h1>{title}</h1>
<div class="ctl">filter tasks/agents: <input id="flt" size="24" placeholder="task id or agent id">
zoom from <input id="z0" size="7" value="{x0}"> to <input id="z1" size="7" value="{x1}"> s
<button id="zb">apply</button> <button id="zr">reset</button> <span id="cnt"></span></div>
{notes}
<svg id="tl" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">
<defs><clipPath id="lc"><rect x="{left}" y="-2" width="{plot_w}" height="{pitch_clip}"/></clipPath></defs>
<g id="legend">{legend}</g><g id="axis">{axis}</g><g id="lanes">{lanes}</g></svg>
<div id="tip"></div>
<script>
(function(){{
var L={left},W={plot_w},TOP={top},P={pitch},R={right},X0={x0},X1={x1},x0=X0,x1=X1;
var svg=document.getElementById('tl'),tip=document.getElementById('tip'),NS='http://www.w3.org/2000/svg';
function px(t){{return L+(t-x0)/((x1-x0)||1)*W;}}
function axis(){{var g=document.getElementById('axis');while(g.firstChild)g.removeChild(g.firstChild);
 var span=(x1-x0)||1,step=Math.pow(10,Math.floor(Math.log10(span/8)));
 if(span/step>16)step*=5;else if(span/step>8)step*=2;
 var h=svg.getAttribute('height')-22;
 for(var t=Math.ceil(x0/step)*step;t<=x1+1e-9;t+=step){{var x=px(t);
  var ln=document.createElementNS(NS,'line');ln.setAttribute('x1',x);ln.setAttribute('x2',x);
  ln.setAttribute('y1',TOP-6);ln.setAttribute('y2',h);ln.setAttribute('stroke','#e4e4e4');g.appendChild(ln);
  var tx=document.createElementNS(NS,'text');tx.setAttribute('x',x);tx.setAttribute('y',h+14);
  tx.setAttribute('text-anchor','middle');tx.textContent=(+t.toFixed(6))+' s';g.appendChild(tx);}}}}
function rescale(){{
 svg.querySelectorAll('rect.bar').forEach(function(r){{var a=Math.max(px(+r.dataset.s),L),
  b=Math.min(px(+r.dataset.e),L+W);r.setAttribute('x',a);r.setAttribute('width',b>=a?Math.max(b-a,0.5):0);}});
 svg.querySelectorAll('.mk').forEach(function(m){{var x=px(+m.dataset.t);
  m.style.display=(x>=L&&x<=L+W)?'':'none';m.removeAttribute('display');}});
 svg.querySelectorAll('line.mk').forEach(function(l){{var x=px(+l.dataset.t);
  l.setAttribute('x1',x);l.setAttribute('x2',x);}});
 svg.querySelectorAll('text.mk').forEach(function(t){{t.setAttribute('x',px(+t.dataset.t));}});
 svg.querySelectorAll('path.arrival').forEach(function(p){{
  p.setAttribute('d','M'+px(+p.dataset.t)+',1 l6,4 l-6,4 z');}});
 axis();}}
function restack(){{var q=document.getElementById('flt').value.trim().toLowerCase(),y=0,n=0;
 var prev=null;
 svg.querySelectorAll('.lane').forEach(function(g){{var ok=!q||g.dataset.task.toLowerCase()==q||
  g.dataset.agent.toLowerCase()==q||g.dataset.task.toLowerCase().indexOf(q)==0;
  g.style.display=ok?'':'none';if(!ok)return;
  g.setAttribute('transform','translate(0,'+(TOP+y*P)+')');y++;n++;
  var first=g.dataset.group!==prev;prev=g.dataset.group;
  g.querySelectorAll('.grp,.gsep').forEach(function(e){{e.removeAttribute('display');
   e.style.display=first&&y>1||first&&e.classList.contains('grp')?'':'none';}});}});
 svg.setAttribute('height',TOP+Math.max(y,1)*P+30);
 document.getElementById('cnt').textContent=n+' of {n_rows} lanes';
 axis();}}
document.getElementById('flt').addEventListener('input',restack);
document.getElementById('zb').addEventListener('click',function(){{
 var a=parseFloat(document.getElementById('z0').value),b=parseFloat(document.getElementById('z1').value);
 if(isFinite(a)&&isFinite(b)&&a<b){{x0=a;x1=b;rescale();}}}});
document.getElementById('zr').addEventListener('click',function(){{x0=X0;x1=X1;
 document.getElementById('z0').value=X0;document.getElementById('z1').value=X1;rescale();}});
svg.addEventListener('mousemove',function(ev){{var el=ev.target.closest('[data-tip]');
 if(!el){{tip.style.display='none';return;}}tip.textContent=el.getAttribute('data-tip');tip.style.display='block';
 tip.style.left=(ev.clientX+14)+'px';tip.style.top=(ev.clientY+12)+'px';}});
svg.addEventListener('mouseleave',function(){{tip.style.display='none';}});
// hover text lives in each element's <title>; move it to data-tip so only our tooltip shows
svg.querySelectorAll('title').forEach(function(t){{var p=t.parentNode;if(p&&p!==svg){{
 p.setAttribute('data-tip',t.textContent);p.removeChild(t);}}}});
restack();
}})();
</script></body></html>
"""
