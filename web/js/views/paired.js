// The paired comparison of a sweep (GET /api/sweeps/{id}/compare): each level of a factor against a
// baseline level, seed by seed, within every cell of the `by` axes, with the delta's 95% interval,
// the t / sign-flip / Holm p-values, the seeds of either side and a verdict in the words of
// `ablate compare` (cli/commands/compare.cc), which never reads a direction into an interval that
// includes 0. Every row carries the API's row as JSON in data-row.
import {api} from '../api.js';
import {h, replace, errorBox} from '../util.js';

// The CLI's verdict, word for word.
export function verdict(r) {
  if (r.test === 'none') return 'no pairs';
  const interval = r.ci_low !== null && r.ci_high !== null;
  if (r.delta === 0 && r.ci_low === 0 && r.ci_high === 0 && interval) return 'no difference';
  if (!interval) return 'too few seeds';
  if (r.ci_low > 0 || r.ci_high < 0) {
    const dir = r.delta > 0 ? 'higher' : 'lower';
    return r.p_adjusted < 0.05 ? dir : `${dir} (not after Holm)`;
  }
  return 'no detectable difference';
}

// C's "%.*f" as the CLI prints it ("-0.0000" reads as a sign error: zero is shown as zero).
export function fixed(v, d) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '-';
  const s = v.toFixed(d);
  return /^-[0.]*$/.test(s) ? s.slice(1) : s;
}

// C's "%.6g" (the CLI's default for a real).
export function g6(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '-';
  return String(Number(v.toPrecision(6)));
}

// "-0.0123 [-0.0201, -0.0045]", or the delta with "(no interval: n < 3)".
export function deltaText(r) {
  if (r.test === 'none') return '-';
  const d = Math.abs(r.delta) >= 100 ? 2 : 4;
  return fixed(r.delta, d) + (r.ci_low !== null && r.ci_high !== null ?
    ` [${fixed(r.ci_low, d)}, ${fixed(r.ci_high, d)}]` : ' (no interval: n < 3)');
}

// "4 (1 diverged, 1 failed)".
export function seedsText(seeds, diverged, failed, missing) {
  const extra = [diverged ? `${diverged} diverged` : null, failed ? `${failed} failed` : null,
    missing ? `${missing} pending` : null].filter(Boolean);
  return extra.length ? `${seeds} (${extra.join(', ')})` : String(seeds);
}

export function pairedView(container, ctx) {
  const {sweep} = ctx;
  const controls = h('div', {class: 'controls'});
  const table = h('div', {class: 'table-scroll', id: 'paired'});
  const note = h('div', {class: 'muted small', id: 'paired-note'});
  replace(container, h('h2', {id: 'paired-title'}, 'Paired comparison'), controls, table, note);
  const factors = sweep.axes.filter((a) => a !== 'seed');
  let levels = [];  // of the factor, from the last answer

  const state = () => {
    const s = ctx.getState();
    const factor = factors.includes(s.pfactor) ? s.pfactor : factors[0] || '';
    const by = (s.pby || '').split(',').filter((a) => a && a !== factor && factors.includes(a));
    return {
      factor,
      baseline: s.pbase || '',
      by,
      // A nuisance axis (e.g. optimizer.lr) at which each level is taken at its best value.
      best: s.pbest && s.pbest !== factor && !by.includes(s.pbest) && factors.includes(s.pbest) ?
        s.pbest : '',
      metric: s.pmetric || s.metric || 'final_val_loss',
    };
  };

  const renderControls = () => {
    const st = state();
    const set = (changes) => {
      ctx.setState(changes);
      renderControls();
      load();
    };
    const by = h('fieldset', {class: 'inline'}, h('legend', {}, 'by'),
        factors.filter((a) => a !== st.factor).map((a) => h('label', {class: 'check'},
            h('input', {type: 'checkbox', value: a, checked: st.by.includes(a), onchange: () => {
              set({pby: [...by.querySelectorAll('input:checked')].map((i) => i.value).join(',')});
            }}), a)));
    replace(controls,
        h('label', {for: 'paired-factor'}, 'factor '),
        h('select', {id: 'paired-factor', onchange: (e) => {
          levels = [];
          set({pfactor: e.target.value, pbase: null});
        }}, factors.map((a) => h('option', {value: a, selected: a === st.factor}, a))),
        h('label', {for: 'paired-baseline'}, 'baseline '),
        h('select', {id: 'paired-baseline', onchange: (e) => set({pbase: e.target.value})},
            h('option', {value: '', selected: !st.baseline}, levels.length ? `first (${levels[0]})` : 'first'),
            levels.map((v) => h('option', {value: v, selected: v === st.baseline}, v))),
        by,
        h('label', {for: 'paired-best'}, 'best over '),
        h('select', {id: 'paired-best', onchange: (e) => set({pbest: e.target.value || null})},
            h('option', {value: '', selected: !st.best}, 'none'),
            factors.filter((a) => a !== st.factor && !st.by.includes(a)).map((a) =>
              h('option', {value: a, selected: a === st.best}, a))),
        h('label', {for: 'paired-metric'}, 'metric '),
        ctx.metricSelect('paired-metric', st.metric, (v) => set({pmetric: v})));
  };

  let seq = 0;
  const load = async () => {
    const my = ++seq;
    const st = state();
    if (!st.factor) {
      replace(table, h('p', {class: 'muted'}, 'no axis besides seed to compare'));
      return;
    }
    try {
      const res = await api(`sweeps/${sweep.id}/compare`, {factor: st.factor, baseline: st.baseline,
        metric: st.metric, by: st.by.join(','), ...(st.best ? {best_over: st.best} : {})});
      if (my !== seq) return;
      if (String(res.levels) !== String(levels)) {
        levels = res.levels || [];
        renderControls();
      }
      render(res);
    } catch (e) {
      if (my === seq) replace(table, errorBox(e)), replace(note);
    }
  };

  const render = (res) => {
    const {rows, by, factor, baseline, metric} = res;
    const best = res.best_over || '';
    if (rows.length === 0) {
      replace(table, h('p', {class: 'muted'},
          `nothing to compare: no level of ${factor} besides the baseline ${baseline}`));
      replace(note);
      return;
    }
    const num = (text, cls = '') => h('td', {class: `num ${cls}`.trim()}, text);
    const body = rows.map((r) => {
      const v = verdict(r);
      const flags = [
        r.test === 'welch-t' ? h('span', {class: 'flag', title: 'no seed in common with the baseline'},
            'unpaired (Welch)') : null,
        r.test !== 'none' && r.ci_low === null ? h('span', {class: 'flag'}, 'no interval: n < 3') : null,
        r.diverged + r.baseline_diverged > 0 ? h('span', {class: 'flag diverged',
          title: 'diverged seeds are left out of the pairs: the divergence may be the finding'},
        `⚠ ${r.diverged + r.baseline_diverged} diverged seed${r.diverged + r.baseline_diverged === 1 ? '' : 's'}`) : null,
      ].filter(Boolean);
      const dir = v === 'higher' || v === 'lower' ? ` verdict-${v}` : '';
      return h('tr', {dataset: {row: JSON.stringify(r)}},
          r.cell.map((c) => h('th', {scope: 'row'}, c)),
          h('th', {scope: 'row', class: 'level'}, r.value),
          best ? h('td', {class: 'best-value'}, r.best_value ?? '-') : null,
          best ? h('td', {class: 'baseline-best-value'}, r.baseline_best_value ?? '-') : null,
          num(String(r.n), 'n'), num(g6(r.mean), 'mean'), num(g6(r.baseline_mean), 'baseline-mean'),
          num(deltaText(r), 'delta'),
          num(r.test === 'none' ? '-' : fixed(r.p_value, 4), 'p'),
          num(r.test === 'paired-t' ? fixed(r.p_permutation, 4) : '-', 'p-perm'),
          num(r.test === 'none' ? '-' : fixed(r.p_adjusted, 4), 'p-holm'),
          h('td', {class: 'seeds'}, seedsText(r.seeds, r.diverged, r.failed, r.missing)),
          h('td', {class: 'seeds'}, seedsText(r.baseline_seeds, r.baseline_diverged, r.baseline_failed,
              r.baseline_missing)),
          h('td', {class: 'test'}, r.test),
          h('td', {class: `verdict-cell${dir}`}, h('span', {class: 'verdict'}, v), flags.length ? ' ' : null, flags));
    });
    replace(table, h('table', {class: 'data paired', 'aria-describedby': 'paired-title'},
        h('thead', {}, h('tr', {}, by.map((a) => h('th', {scope: 'col'}, a)),
            h('th', {scope: 'col'}, factor),
            best ? [h('th', {scope: 'col'}, `best ${best}`), h('th', {scope: 'col'}, 'baseline\'s best')] : null,
            ['n', 'mean', 'baseline mean', 'delta [95% CI]', 'p', 'p sign-flip', 'p Holm'].map(
                (c) => h('th', {scope: 'col', class: 'num'}, c)),
            ['seeds', 'baseline seeds', 'test', 'verdict'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, body)));
    const leftOut = rows.reduce((a, r) => a + r.left_out, 0);
    const diverged = rows.reduce((a, r) => a + r.diverged + r.baseline_diverged, 0);
    replace(note,
        h('p', {}, `${metric}: each ${factor} against ${baseline}, paired by seed (delta = value − baseline, ` +
            'its 95% t interval; other axes not in "by" are averaged within a seed first). ',
        h('b', {}, `p Holm is Holm-adjusted over the ${rows.length} comparison${rows.length === 1 ? '' : 's'} shown`),
        '; p sign-flip is the exact permutation p-value of the pairs. A verdict gives a direction only when ' +
            'the interval excludes 0 ("no detectable difference" otherwise; "too few seeds": n < 3, no interval).'),
        best ? h('p', {}, `Each level at its own best ${best}, chosen by the mean over the seeds all its ` +
            `values have, ${res.optimistic ? 'on the same seeds it is tested on: optimistic (the ' +
            'choice\'s luck is in the difference)' : `tested on seeds ${(res.test_seeds || []).join(', ')}`}.`) : null,
        rows.some((r) => r.test === 'welch-t') ?
          h('p', {}, 'welch-t: no seed in common with the baseline, compared unpaired.') : null,
        leftOut ? h('p', {}, `${leftOut} seed${leftOut === 1 ? '' : 's'} left out of the pairs ` +
            '(diverged, failed, pending or unmatched: see seeds).') : null,
        diverged ? h('p', {class: 'warn'}, 'A level with a diverged seed may be the finding: see seeds.') : null,
        h('p', {}, 'Same as ', h('code', {}, `ablate compare ${sweep.name} --factor ${factor}` +
            (ctx.getState().pbase ? ` --baseline ${baseline}` : '') + ` --metric ${metric}` +
            (by.length ? ` --by ${by.join(',')}` : '') + (best ? ` --best-over ${best}` : '')), '.'));
  };

  renderControls();
  load();
  return {refresh: load, renderControls};
}
