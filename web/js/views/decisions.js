// The early-stopping judgments of a sweep (GET /api/sweeps/{id}/decisions): one row per judgment
// of a configuration at a rung, continue or stop, with the configuration's value (the mean over its
// seeds), the values it was compared with and the threshold the rule drew, so a reader can check
// why each trial was stopped. The same rows as `ablate status SWEEP --decisions`. Rows carry
// data-decision and data-config. Shown only for sweeps with an early_stop rule.
import {api} from '../api.js';
import {h, replace, decimalsFor, errorBox} from '../util.js';

export function decisionsView(container, ctx) {
  const {sweep} = ctx;
  const rule = sweep.early_stop;
  const fmt = (v) => (v === null || v === undefined ? '—' : v.toFixed(decimalsFor(v)));
  const body = h('div', {class: 'table-scroll', id: 'decisions'});
  const ruleText = rule ? `${rule.rule} on ${rule.metric} (${rule.mode}), grace ${rule.grace_steps} steps` +
      (rule.rule === 'asha' ? `, reduction ${rule.reduction}` : `, every ${rule.interval}, ` +
      `at least ${rule.min_configs} others`) + (rule.factors?.length ? `; never across ${rule.factors.join(', ')}` : '') : '';
  replace(container, h('h2', {id: 'decisions-title'}, 'Early stopping'),
      h('p', {class: 'muted small'}, ruleText, '. Seeds of a configuration are judged together on ',
          'their mean; stopped trials keep their checkpoints (ablate retry SWEEP --stopped).'), body);

  const refresh = async () => {
    let list;
    try {
      list = (await api(`sweeps/${sweep.id}/decisions`)).decisions;
    } catch (e) {
      replace(body, errorBox(e));
      return;
    }
    if (list.length === 0) {
      replace(body, h('p', {class: 'muted'}, 'No configuration has reached its first rung yet.'));
      return;
    }
    const stops = list.filter((d) => d.decision === 'stop').length;
    replace(body, h('p', {class: 'small'}, `${list.length} judgment${list.length === 1 ? '' : 's'}, `,
        h('b', {}, `${stops} stop${stops === 1 ? '' : 's'}`)),
    h('table', {class: 'data'},
        h('thead', {}, h('tr', {}, ['step', 'rung', 'configuration', 'group', 'trials', 'value',
          'compared with', 'threshold', 'decision'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, list.map((d) => h('tr', {dataset: {decision: d.decision, config: d.config}},
            h('td', {class: 'num'}, String(d.step)), h('td', {class: 'num'}, String(d.rung)),
            h('th', {scope: 'row'}, d.config), h('td', {}, d.group || '—'),
            h('td', {}, d.trial_ids.map((id, i) => [i ? ' ' : '', h('a', {href: `#/trials/${id}`}, `#${id}`)])),
            h('td', {class: 'num', title: `seeds: ${d.seed_values.map(fmt).join(', ')}`}, fmt(d.value)),
            h('td', {class: 'small'}, d.compared.map((c) => `${c.config} ${fmt(c.value)}`).join('; ')),
            h('td', {class: 'num'}, fmt(d.threshold)),
            h('td', {}, h('span', {class: `badge ${d.decision === 'stop' ? 'state-stopped' : 'state-succeeded'}`},
                d.decision)))))));
  };
  refresh();
  return {refresh};
}
