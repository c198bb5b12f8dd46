#include "observe/status_page.h"

#include "absl/strings/str_replace.h"

namespace outboxd::observe {
namespace {

// Inline everything: the page must work where the metrics port is reachable and
// nothing else is (a cluster's pod network, an air-gapped host). The SVG polylines
// are in the markup, so the script only sets their points (no namespace juggling).
// Every 2 s the script fetches /metrics, /healthz, /readyz and /status.json (the
// server's last 5 minutes of counters, observe/status_history.h) and redraws: rates
// and latencies are deltas between two samples of the counters and of the histogram's
// _sum and _count, as Prometheus' rate() would compute them.
constexpr char kPage[] = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>outboxd status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;gap:24px;align-items:baseline}
header h1{font-size:18px;margin:0}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:14px;
padding:16px 20px}
section{background:#fff;border-radius:6px;padding:12px 16px;box-shadow:0 1px 2px #0002}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.05em;color:#667;margin:0 0 8px}
.big{font-size:26px;font-weight:600}
dl{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;margin:0}dt{color:#667}dd{margin:0}
svg{width:100%;height:70px;background:#fafbfc;border:1px solid #e3e5ea}
polyline{fill:none;stroke:#2f6fdb;stroke-width:1.5}
.scale{float:right;color:#99a;font-size:12px}
.ok{color:#17803d}.warn{color:#b36b00}.bad{color:#c4262e}
code{background:#eef0f3;padding:1px 4px;border-radius:3px}
</style></head><body>
<header><h1>outboxd</h1><span>mode <b id="mode">{{MODE}}</b></span>
<span>state <b id="state">loading</b></span><span id="health-reason"></span>
<span id="updated" style="margin-left:auto;color:#aab"></span></header>
<main>
<section id="slot"><h2>Slot and WAL</h2><dl>
<dt>wal_status</dt><dd id="wal-status">-</dd>
<dt>safe WAL size</dt><dd id="safe-wal">-</dd>
<dt>slot lag</dt><dd id="slot-lag">-</dd></dl></section>
<section id="oldest"><h2>Oldest unacknowledged</h2><div class="big" id="oldest-age">-</div>
<div>events in flight: <span id="in-flight">-</span></div></section>
<section id="throughput"><h2>Events per second <span class="scale" id="rate-max"></span></h2>
<div><span class="big" id="rate">-</span>
 /s now, <span id="published">-</span> published since start</div>
<svg viewBox="0 0 300 60" preserveAspectRatio="none">
<polyline id="rate-chart" points=""/></svg></section>
<section id="latency-panel"><h2>Commit &rarr; ack latency
<span class="scale" id="latency-max"></span></h2>
<div><span class="big" id="latency">-</span> ms mean over the last <span id="window">-</span></div>
<svg viewBox="0 0 300 60" preserveAspectRatio="none">
<polyline id="latency-chart" points=""/></svg></section>
<section id="dead-letter-panel"><h2>Dead letters</h2><div class="big" id="dead-letters">-</div>
<div id="dead-letter-help">Reasons: <code>outboxd dead-letter list --pg CONNINFO</code>
 (the table's error column); after a fix, <code>outboxd dead-letter replay</code>.</div></section>
<section id="standby"><h2>Standby</h2><div class="big" id="standby-state">-</div>
<div id="standby-help">streaming: this relay holds the slot. standing by: another relay
holds it and this one takes over when it goes.</div></section>
</main>
<script>
const kEveryMs = 2000;
function parse(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), parseFloat(line.slice(i + 1)));
  }
  return m;
}
function total(m, name) {
  let s = 0;
  for (const [k, v] of m) if (k === name || k.startsWith(name + '{')) s += v;
  return s;
}
function bytes(n) {
  if (!isFinite(n)) return 'unlimited';
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
function set(id, text, cls) {
  const e = document.getElementById(id);
  e.textContent = text;
  if (cls === undefined) return;
  e.classList.remove('ok', 'warn', 'bad');
  if (cls) e.classList.add(cls);
}
// values: one per 2 s sample, null where there is nothing to plot (no acks).
function chart(id, values) {
  const max = Math.max(1e-9, ...values.filter(v => v !== null));
  // The x axis spans the samples the server kept (the window the figures name).
  const step = 300 / Math.max(1, values.length - 1);
  const points = [];
  values.forEach((v, i) => {
    if (v !== null) points.push((i * step).toFixed(1) + ',' + (58 - 56 * v / max).toFixed(1));
  });
  document.getElementById(id).setAttribute('points', points.join(' '));
  return max;
}
async function get(path) {
  const r = await fetch(path, {cache: 'no-store'});
  return {status: r.status, text: await r.text()};
}
// The server's samples ([unix ms, published, latency sum s, latency count]) as rates
// and mean latencies per interval, the way Prometheus' rate() would.
function showHistory(history) {
  const s = JSON.parse(history.text).samples, rates = [], latencies = [];
  for (let i = 1; i < s.length; i++) {
    const seconds = (s[i][0] - s[i - 1][0]) / 1000, acks = s[i][3] - s[i - 1][3];
    rates.push(seconds > 0 ? Math.max(0, (s[i][1] - s[i - 1][1]) / seconds) : 0);
    latencies.push(acks > 0 ? 1000 * (s[i][2] - s[i - 1][2]) / acks : null);
  }
  set('rate-max', 'top ' + chart('rate-chart', rates).toFixed(1) + ' /s');
  set('latency-max', 'top ' + chart('latency-chart', latencies).toFixed(2) + ' ms');
  set('rate', rates.length ? rates[rates.length - 1].toFixed(1) : '-');
  const first = s[0], last = s[s.length - 1];
  const acks = s.length > 1 ? last[3] - first[3] : 0;
  set('latency', acks > 0 ? (1000 * (last[2] - first[2]) / acks).toFixed(2) : '-');
  const window = Math.round((last[0] - first[0]) / 1000);
  set('window', window < 120 ? window + ' s' : Math.round(window / 60) + ' min');
}
function showSlot(m) {
  if (document.getElementById('mode').textContent !== 'cdc') {
    set('wal-status', 'no slot (poll mode)'); set('safe-wal', '-'); set('slot-lag', '-');
    return;
  }
  let status = 'unknown';
  for (const s of ['reserved', 'extended', 'unreserved', 'lost'])
    if (m.get('outboxd_slot_wal_status{status="' + s + '"}') === 1) status = s;
  set('wal-status', status, {reserved: 'ok', extended: 'warn'}[status] || 'bad');
  set('safe-wal', bytes(m.get('outboxd_slot_safe_wal_size_bytes')));
  set('slot-lag', bytes(m.get('outboxd_slot_lag_bytes')));
}
function showState(health, ready) {
  const standingBy = ready.text.startsWith('standing by');
  const state = health.status === 200 ? 'streaming' : standingBy ? 'standing by' : 'unhealthy';
  set('state', state, {streaming: 'ok', 'standing by': 'warn'}[state] || 'bad');
  set('standby-state', state === 'unhealthy' ? 'neither' : state);
  set('health-reason', health.status === 200 ? '' : health.text.trim());
}
async function refresh() {
  try {
    const [metrics, health, ready, history] = await Promise.all(
        [get('/metrics'), get('/healthz'), get('/readyz'), get('/status.json')]);
    const m = parse(metrics.text);
    showSlot(m);
    showState(health, ready);
    showHistory(history);
    set('oldest-age', m.get('outboxd_oldest_unacked_age_seconds').toFixed(1) + ' s');
    set('in-flight', String(m.get('outboxd_events_in_flight')));
    set('published', String(total(m, 'outboxd_events_published_total')));
    const dead = m.get('outboxd_events_dead_lettered_total');
    set('dead-letters', dead === undefined ? 'none in poll mode' : String(dead),
        dead ? 'bad' : 'ok');
    set('updated', 'updated ' + new Date().toLocaleTimeString());
  } catch (e) {
    set('state', 'relay unreachable', 'bad');
  }
}
refresh();
setInterval(refresh, kEveryMs);
</script></body></html>
)html";

}  // namespace

std::string StatusPageHtml(RelayMode mode) {
  return absl::StrReplaceAll(kPage, {{"{{MODE}}", mode == RelayMode::kCdc ? "cdc" : "poll"}});
}

}  // namespace outboxd::observe
