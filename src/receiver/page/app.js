// sessionpipe receiver page. Long-polls /page/api/state and keeps the DOM in step with it;
// every action is a POST to /page/api/enqueue with the CSRF header. Untrusted text (session
// fields, tool messages, notes) only ever goes into textContent.
'use strict';
(() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  let csrf = '';
  let version = 0;
  let skew = 0; // server clock minus local clock, ms
  let current = null;
  const cards = new Map(); // session key -> element
  const tools = new Map(); // attention_id -> tool, remembered for the message list

  const FINAL = new Set(['delivered', 'expired', 'unsupported', 'failed']);

  function setConn(state, text) {
    const c = $('#conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  function ago(iso) {
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return '';
    const s = Math.max(0, Math.round((Date.now() + skew - t) / 1000));
    if (s < 5) return 'just now';
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }

  function short(text, n) {
    const t = String(text || '').replace(/\s+/g, ' ').trim();
    return t.length > n ? t.slice(0, n - 1) + '…' : t;
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { 'content-type': 'application/json', 'x-sessionpipe-csrf': csrf },
      body: JSON.stringify(body),
    });
    if (r.status === 401) {
      location.href = '/login';
      throw new Error('logged out');
    }
    const j = r.status === 204 ? {} : await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(j.reason || 'HTTP ' + r.status);
    return j;
  }

  function enqueue(session, message) {
    return post('/page/api/enqueue', { session, message });
  }

  function describe(m) {
    if (m.kind === 'permission.answer') {
      const tool = tools.get(m.for);
      const verb = m.decision === 'allow' ? 'Allow' : 'Deny';
      return verb + ' ' + (tool || m.for) + (m.note ? ' — “' + short(m.note, 40) + '”' : '');
    }
    if (m.kind === 'prompt') return 'Prompt “' + short(m.text, 60) + '”';
    if (m.kind === 'cancel') return 'Stop';
    return m.kind || 'message';
  }

  function renderMessages(card, s) {
    const ul = $('.messages', card);
    ul.replaceChildren(...s.messages.map((m) => {
      const li = document.createElement('li');
      li.className = 'msg';
      li.dataset.message = m.id || '';
      li.dataset.kind = m.kind || '';
      li.dataset.status = m.status;
      if (m.for) li.dataset.for = m.for;
      const what = document.createElement('span');
      what.className = 'what';
      what.textContent = describe(m);
      what.title = m.kind === 'prompt' ? m.text : describe(m);
      const out = document.createElement('span');
      out.className = 'outcome';
      out.dataset.status = m.status;
      out.textContent = m.status;
      const when = document.createElement('span');
      when.className = 'when';
      when.dataset.at = m.acked_at || m.at || '';
      when.textContent = (FINAL.has(m.status) && m.acked_at ? 'answered ' : 'sent ') + ago(when.dataset.at);
      const detail = document.createElement('span');
      detail.className = 'detail';
      detail.textContent = m.detail || '';
      li.append(what, out, when, detail);
      return li;
    }));
  }

  function renderAttentions(card, s) {
    const box = $('.attentions', card);
    const want = new Set(s.attentions.map((a) => a.attention_id));
    for (const el of [...box.children]) {
      if (!want.has(el.dataset.attention)) el.remove();
    }
    for (const a of s.attentions) {
      if (a.tool) tools.set(a.attention_id, a.tool);
      let el = [...box.children].find((e) => e.dataset.attention === a.attention_id);
      if (!el) {
        el = $('#attention-tpl').content.firstElementChild.cloneNode(true);
        el.dataset.attention = a.attention_id;
        $('.allow', el).addEventListener('click', () => answer(el, s.key, a.attention_id, 'allow'));
        $('.deny', el).addEventListener('click', () => answer(el, s.key, a.attention_id, 'deny'));
        box.append(el);
      }
      $('.att-kind', el).textContent = a.kind === 'permission' || !a.kind ? 'Permission' : a.kind;
      $('.att-tool', el).textContent = a.tool || '';
      $('.att-msg', el).textContent = a.message || '';
      $('.att-when', el).textContent = a.needed_at ? '· asked ' + ago(a.needed_at) : '';
      // The newest answer for this prompt decides what the buttons may do.
      const ans = s.messages.find((m) => m.kind === 'permission.answer' && m.for === a.attention_id);
      const status = $('.att-status', el);
      const waiting = ans && !FINAL.has(ans.status);
      for (const b of el.querySelectorAll('button')) b.disabled = !!waiting || el.dataset.busy === '1';
      if (el.dataset.busy === '1') continue;
      status.classList.remove('error');
      if (waiting) {
        status.textContent = (ans.decision === 'allow' ? 'Allow' : 'Deny') + ' sent, waiting for the machine…';
      } else if (ans) {
        status.textContent = 'Last answer: ' + ans.status + (ans.detail ? ' (' + ans.detail + ')' : '');
      } else {
        status.textContent = '';
      }
    }
  }

  async function answer(el, session, id, decision) {
    const status = $('.att-status', el);
    el.dataset.busy = '1';
    for (const b of el.querySelectorAll('button')) b.disabled = true;
    status.classList.remove('error');
    status.textContent = 'Sending…';
    try {
      const note = $('.note', el).value.trim();
      const m = { kind: 'permission.answer', for: id, decision };
      if (note) m.note = note;
      await enqueue(session, m);
      status.textContent = (decision === 'allow' ? 'Allow' : 'Deny') + ' sent, waiting for the machine…';
    } catch (e) {
      status.classList.add('error');
      status.textContent = 'Not sent: ' + e.message;
      for (const b of el.querySelectorAll('button')) b.disabled = false;
    } finally {
      delete el.dataset.busy;
    }
  }

  function sessionTitle(s) {
    return s.title || s.cwd || s.repo || s.id;
  }

  function createCard(key) {
    const card = $('#session-tpl').content.firstElementChild.cloneNode(true);
    card.dataset.session = key;
    const form = $('.compose', card);
    const text = $('.prompt-text', card);
    const status = $('.form-status', card);
    const say = (msg, bad) => {
      status.textContent = msg;
      status.classList.toggle('error', !!bad);
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const t = text.value;
      if (!t.trim()) return say('Write a message first.', true);
      const btn = $('.queue', card);
      btn.disabled = true;
      try {
        await enqueue(key, { kind: 'prompt', text: t });
        text.value = '';
        say('Queued for the next turn.');
      } catch (e) {
        say('Not queued: ' + e.message, true);
      } finally {
        btn.disabled = false;
      }
    });
    text.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) form.requestSubmit();
    });
    $('.stop', card).addEventListener('click', async (ev) => {
      const btn = ev.currentTarget;
      btn.disabled = true;
      try {
        await enqueue(key, { kind: 'cancel' });
        say('Stop sent.');
      } catch (e) {
        say('Stop not sent: ' + e.message, true);
      } finally {
        btn.disabled = false;
      }
    });
    return card;
  }

  function updateCard(card, s) {
    card.classList.toggle('needs', s.attentions.length > 0);
    $('.title', card).textContent = sessionTitle(s);
    const st = $('.state', card);
    st.textContent = s.state;
    st.dataset.state = s.state;
    const bits = [s.harness];
    if (s.branch) bits.push(s.branch);
    if (s.machine) bits.push(s.machine);
    if (sessionTitle(s) !== s.id) bits.push(short(s.id, 13));
    bits.push('last event ' + ago(s.last_at));
    $('.meta', card).textContent = bits.join(' · ');
    renderMessages(card, s);
    renderAttentions(card, s);
  }

  function render(state) {
    current = state;
    version = state.version;
    if (state.csrf) csrf = state.csrf;
    skew = Date.parse(state.now) - Date.now();
    const list = $('#sessions');
    const sessions = [...state.sessions].sort(
      (a, b) => (b.attentions.length > 0) - (a.attentions.length > 0));
    const keep = new Set(sessions.map((s) => s.key));
    for (const [k, el] of cards) {
      if (!keep.has(k)) {
        el.remove();
        cards.delete(k);
      }
    }
    sessions.forEach((s, i) => {
      let card = cards.get(s.key);
      if (!card) {
        card = createCard(s.key);
        cards.set(s.key, card);
      }
      updateCard(card, s);
      // Move only when out of place, so a card being typed in keeps its focus.
      if (list.children[i] !== card) list.insertBefore(card, list.children[i] || null);
    });
    $('#empty').hidden = sessions.length > 0;
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function loop() {
    let first = true;
    for (;;) {
      try {
        const url = first ? '/page/api/state' : '/page/api/state?since=' + version + '&wait=25';
        const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
        if (r.status === 401) {
          setConn('out', 'logged out');
          location.href = '/login';
          return;
        }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        render(await r.json());
        setConn('live', 'live');
        first = false;
      } catch (e) {
        setConn('retry', 'reconnecting…');
        first = true;
        await sleep(2000);
      }
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('#logout').addEventListener('click', async () => {
      try { await post('/logout', {}); } catch (e) { /* logged out either way */ }
      location.href = '/login';
    });
    // Relative times age without new data.
    setInterval(() => {
      if (current) for (const s of current.sessions) {
        const card = cards.get(s.key);
        if (card) updateCard(card, s);
      }
    }, 15000);
    loop();
  });
})();
