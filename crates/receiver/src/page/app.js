// sessionpipe receiver page. Long-polls /page/api/state and keeps the DOM in step with it;
// every action is a POST to /page/api/enqueue with the CSRF header. Untrusted text (session
// fields, tool messages, notes) only ever goes into textContent.
//
// Signed control (DECISIONS 22, 33): once machines are paired here (state.signing.machines), every
// answer, prompt and stop is a command string signed on this device instead: by a day key
// (WebCrypto P-256, non-extractable, kept in IndexedDB) that a passkey vouches for with a
// grant made once a day, and posted to /page/api/signed. The pairing view (/pair?code=) shows
// the terminal's six check digits and approves with a passkey: the receiver carries what the
// passkey produced and can never sign anything itself.
'use strict';
(() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  let csrf = '';
  let version = 0;
  let skew = 0; // server clock minus local clock, ms
  let current = null;
  const cards = new Map(); // session key -> element
  const headings = new Map(); // 'id:<paired machine>' or 'name:<machine name>' -> its heading
  const tools = new Map(); // attention_id -> tool, remembered for the message list

  const FINAL = new Set(['delivered', 'expired', 'unsupported', 'failed', 'refused']);

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

  // ---- signed control ---------------------------------------------------------------
  const enc = new TextEncoder();
  function b64u(buf) {
    const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
    let s = '';
    for (const x of b) s += String.fromCharCode(x);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function unb64u(str) {
    let s = str.replace(/-/g, '+').replace(/_/g, '/');
    while (s.length % 4) s += '=';
    const bin = atob(s);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  const rand = (n) => crypto.getRandomValues(new Uint8Array(n));
  async function sha256(str) {
    return new Uint8Array(await crypto.subtle.digest('SHA-256', enc.encode(str)));
  }

  // The passkey this browser made for the rp: {id, alg, spki}, all the machine needs.
  const passkeySlot = (rp) => 'sessionpipe.passkey.' + rp;
  function storedPasskey(rp) {
    try { return JSON.parse(localStorage.getItem(passkeySlot(rp)) || 'null'); } catch (e) { return null; }
  }
  async function ensurePasskey(rp) {
    const have = storedPasskey(rp);
    if (have) return have;
    const cred = await navigator.credentials.create({ publicKey: {
      rp: { id: rp, name: 'sessionpipe' },
      user: { id: rand(16), name: 'sessionpipe', displayName: 'sessionpipe' },
      challenge: rand(32),
      pubKeyCredParams: [{ type: 'public-key', alg: -7 }, { type: 'public-key', alg: -257 }],
      authenticatorSelection: { residentKey: 'preferred', userVerification: 'required' },
      attestation: 'none',
      timeout: 120000,
    } });
    const spki = cred.response.getPublicKey && cred.response.getPublicKey();
    if (!spki) throw new Error('this browser cannot hand over the passkey\'s public key');
    const key = { id: b64u(cred.rawId), alg: cred.response.getPublicKeyAlgorithm(), spki: b64u(spki) };
    localStorage.setItem(passkeySlot(rp), JSON.stringify(key));
    return key;
  }
  async function passkeyAssert(rp, key, challenge) {
    const a = await navigator.credentials.get({ publicKey: {
      challenge,
      rpId: rp,
      allowCredentials: [{ type: 'public-key', id: unb64u(key.id) }],
      userVerification: 'required',
      timeout: 120000,
    } });
    return {
      cred: b64u(a.rawId),
      ad: b64u(a.response.authenticatorData),
      cd: b64u(a.response.clientDataJSON),
      sig: b64u(a.response.signature),
    };
  }

  // IndexedDB: the day key (a non-extractable CryptoKey) and its grant.
  function idb() {
    return new Promise((resolve, reject) => {
      const r = indexedDB.open('sessionpipe', 1);
      r.onupgradeneeded = () => r.result.createObjectStore('kv');
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
  }
  async function idbGet(k) {
    const db = await idb();
    return new Promise((resolve, reject) => {
      const q = db.transaction('kv').objectStore('kv').get(k);
      q.onsuccess = () => resolve(q.result);
      q.onerror = () => reject(q.error);
    });
  }
  async function idbPut(k, v) {
    const db = await idb();
    return new Promise((resolve, reject) => {
      const t = db.transaction('kv', 'readwrite');
      t.objectStore('kv').put(v, k);
      t.oncomplete = () => resolve();
      t.onerror = () => reject(t.error);
    });
  }

  const DAY_MS = 24 * 3600 * 1000;
  async function dayKey(rp) {
    const key = storedPasskey(rp);
    if (!key) throw new Error('this browser holds no passkey the machine knows; run sp pair on the machine and approve here');
    const have = await idbGet('day.' + rp).catch(() => null);
    if (have && have.passkey === key.id && have.exp > Date.now() + 5 * 60000) return have;
    const pair = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign', 'verify']);
    const pub = b64u(await crypto.subtle.exportKey('spki', pair.publicKey));
    const iat = Date.now();
    const exp = iat + DAY_MS - 60000;
    const str = JSON.stringify({ v: 1, t: 'sessionpipe.grant', pub, iat, exp, rp });
    const a = await passkeyAssert(rp, key, await sha256(str));
    const rec = { priv: pair.privateKey, passkey: key.id, exp, grant: { str, cred: a.cred, ad: a.ad, cd: a.cd, sig: a.sig } };
    await idbPut('day.' + rp, rec);
    return rec;
  }

  // DECISIONS 36: what can make code run without a further question is signed by a touch
  // of the passkey over exactly that command (a confirm), at the moment of the answer; the
  // machine refuses it on the day key alone (any script this origin serves can use that).
  // Deny, cancel, Not now and messages still ride the day key.
  // A message to a session whose hooks last reported a mode that runs tools without asking
  // needs a touch too (the machine's own record decides; this is what the page was told).
  const ASKS_FIRST = new Set(['default', 'plan', 'dontAsk']);
  function runsUnasked(session) {
    const s = current && (current.sessions || []).find((x) => x.key === session);
    return !!(s && typeof s.permission_mode === 'string' && !ASKS_FIRST.has(s.permission_mode));
  }

  function needsTouch(message, session) {
    return (message.kind === 'permission.answer' && message.decision === 'allow') || message.kind === 'start' ||
      (message.kind === 'prompt' && runsUnasked(session));
  }

  // The most attention ids one batch answer names (DECISIONS 36).
  const BATCH_MAX = 50;

  async function sendSigned(signing, session, message) {
    const touch = needsTouch(message, session);
    const day = touch ? null : await dayKey(signing.rp_id);
    const c = { v: 1, t: 'sessionpipe.control', machine: signing.machine, kind: message.kind, session };
    // DECISIONS 30's fields change what runs: signed, inside cmd.
    for (const k of ['text', 'for', 'decision', 'scope', 'input', 'interrupt', 'answers', 'note', 'cwd', 'files', 'harness']) if (message[k] !== undefined) c[k] = message[k];
    c.nonce = b64u(rand(16));
    c.iat = Date.now();
    const cmd = JSON.stringify(c);
    let body;
    if (touch) {
      const key = storedPasskey(signing.rp_id);
      if (!key) throw new Error('this browser holds no passkey the machine knows; run sp pair on the machine and approve here');
      body = { cmd, confirm: await passkeyAssert(signing.rp_id, key, await sha256(cmd)) };
    } else {
      const sig = await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, day.priv, enc.encode(cmd));
      body = { cmd, csig: b64u(sig), grant: day.grant };
    }
    // A prompt's timing rides beside the signed command (DECISIONS 25).
    if (message.mode) body.mode = message.mode;
    return post('/page/api/signed', body);
  }

  // The paired machines (DECISIONS 33), from state.signing.machines (an older receiver's
  // state names only its latest pairing).
  function pairedMachines(state) {
    const sg = state && state.signing;
    if (!sg) return [];
    if (Array.isArray(sg.machines)) return sg.machines;
    return sg.machine ? [{ machine: sg.machine, name: sg.name }] : [];
  }

  // What a command for `session` is signed for (DECISIONS 33): the paired machine whose
  // token its session's events came with (`machine_id`). A session no machine sent (the
  // shared token) is signed for the one paired machine when there is exactly one (a sender
  // from before rule 33), else sent unsigned (`null`), as to an unpaired sender. Throws for a
  // session whose machine was removed: no machine would take it.
  function signingFor(session) {
    const sg = current && current.signing;
    const machines = pairedMachines(current);
    if (!sg || machines.length === 0) return null;
    const s = (current.sessions || []).find((x) => x.key === session);
    const id = s && s.machine_id;
    let m = null;
    if (id) {
      m = machines.find((x) => x.machine === id);
      if (!m) throw new Error('this session\'s machine is no longer paired here; run sp pair on it');
    } else if (machines.length === 1) {
      m = machines[0];
    }
    return m ? { rp_id: sg.rp_id, machine: m.machine, name: m.name } : null;
  }

  async function enqueue(session, message) {
    const signing = signingFor(session);
    if (signing) return sendSigned(signing, session, message);
    return post('/page/api/enqueue', { session, message });
  }

  // "Remove machine" (DECISIONS 33): ends that machine's token and keys, no other's. The
  // first click arms the button ("Confirm remove"), a second within 5 s removes.
  async function removeMachine(m, btn) {
    if (btn.dataset.armed !== '1') {
      btn.dataset.armed = '1';
      btn.textContent = 'Confirm remove ' + (m.name || m.machine);
      setTimeout(() => {
        if (btn.dataset.armed === '1') {
          delete btn.dataset.armed;
          btn.textContent = 'Remove machine';
        }
      }, 5000);
      return;
    }
    delete btn.dataset.armed;
    btn.disabled = true;
    try {
      await post('/page/api/machines/remove', { machine: m.machine });
    } catch (e) {
      btn.disabled = false;
      btn.textContent = 'Remove machine';
      btn.title = e.message;
    }
  }

  // A machine's heading: its name, last contact, Away word, paired key and Remove button.
  function fillMachineHeading(h, label, m) {
    h.dataset.machine = label;
    if (m) h.dataset.machineId = m.machine;
    let name = $('.machine-name', h);
    if (!name) {
      name = document.createElement('span');
      name.className = 'machine-name';
      h.append(name);
    }
    name.textContent = label;
    let info = $('.machine-info', h);
    let btn = $('button.remove-machine', h);
    if (!m) {
      if (info) info.remove();
      if (btn) btn.remove();
      return;
    }
    if (!info) {
      info = document.createElement('span');
      info.className = 'machine-info';
      h.append(info);
    }
    const bits = ['paired ' + m.machine];
    if (m.last_at) bits.push('last contact ' + ago(m.last_at));
    if (m.away !== undefined) bits.push(m.away ? 'away' : 'at the desk');
    if (m.keys && m.keys.length) bits.push('key ' + String(m.keys[0]).slice(0, 12) + (m.keys.length > 1 ? ' +' + (m.keys.length - 1) : ''));
    info.textContent = bits.join(' · ');
    if (!btn) {
      btn = document.createElement('button');
      btn.type = 'button';
      btn.className = 'remove-machine';
      btn.textContent = 'Remove machine';
      h.append(btn);
    }
    btn.onclick = () => removeMachine(m, btn);
  }

  async function ensureCsrf() {
    if (csrf) return;
    const r = await fetch('/page/api/state', { credentials: 'same-origin', cache: 'no-store' });
    if (r.ok) render(await r.json());
  }

  async function showPairing() {
    const code = new URLSearchParams(location.search).get('code') || '';
    const box = $('#pairing');
    const status = $('#pair-status');
    const btn = $('#pair-approve');
    box.hidden = false;
    const say = (msg, bad, state) => {
      status.textContent = msg;
      status.classList.toggle('error', !!bad);
      if (state) status.dataset.state = state;
    };
    let p;
    try {
      const r = await fetch('/page/api/pairing?code=' + encodeURIComponent(code), { credentials: 'same-origin', cache: 'no-store' });
      if (r.status === 401) { location.href = '/login'; return; }
      if (!r.ok) throw new Error(r.status === 404 ? 'no such pairing (run sp pair again)' : 'HTTP ' + r.status);
      p = await r.json();
    } catch (e) {
      btn.disabled = true;
      return say('Cannot show this pairing: ' + e.message, true);
    }
    $('#pair-check').textContent = p.check.slice(0, 3) + ' ' + p.check.slice(3);
    $('#pair-check').dataset.check = p.check;
    $('#pair-machine').textContent = (p.name || 'A machine') + ' · ' + p.machine;
    if (p.status !== 'pending') {
      btn.disabled = true;
      return say(p.status === 'paired' ? 'Already approved.' : 'This pairing expired; run sp pair again.', p.status !== 'paired', p.status);
    }
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      try {
        if (!window.PublicKeyCredential) throw new Error('this browser has no passkeys (WebAuthn)');
        say('Waiting for your passkey…');
        const key = await ensurePasskey(p.rp_id);
        const proof = await passkeyAssert(p.rp_id, key, await sha256('sessionpipe.pair:' + p.machine + ':' + p.code));
        await ensureCsrf();
        await post('/page/api/pairing', { code: p.code, key, proof });
        say('Approved. The terminal finishes pairing by itself.', false, 'paired');
      } catch (e) {
        say('Not approved: ' + e.message, true);
        btn.disabled = false;
      }
    });
  }

  const MODE_LABEL = { steer: 'Send now', interrupt: 'Interrupt', queue: 'After this turn' };
  const MODE_SENT = {
    queue: 'Queued for the end of the turn.',
    steer: 'Sent for the next tool boundary.',
    interrupt: 'Sent in place of the next tool call.',
  };

  function describe(m) {
    if (m.kind === 'permission.answer') {
      // The call it answered: the receiver keeps it with the prompt (m.call), so the
      // history names it after a reload too.
      const tool = (m.call && m.call.tool) || tools.get(m.for);
      const shown = m.call ? shownCommand(m.call) : '';
      const verb = m.decision === 'allow' ? 'Allow' : 'Deny';
      const how = m.scope === 'session' ? ' for the session' : m.interrupt ? ' and stop' : m.input ? ' (edited)' : '';
      // Never the prompt's internal id: "a prompt" when the call is not known here.
      return verb + ' ' + (tool || 'a prompt') + (shown ? ': ' + short(shown, 60) : '') + how + (m.note ? ' — “' + short(m.note, 40) + '”' : '');
    }
    if (m.kind === 'prompt') return (MODE_LABEL[m.mode] || 'Prompt') + ' “' + short(m.text, 60) + '”';
    if (m.kind === 'cancel') return 'Stop';
    if (m.kind === 'start') return 'Start' + (m.text ? ' “' + short(m.text, 60) + '”' : '');
    return m.kind || 'message';
  }

  // DECISIONS 40: a turn the machine reported (turn.transcript): the prompt that began it and
  // the agent's final text, as text. A turn a message from this page began is shown with that
  // message (its reply came on the ack), not twice.
  function turnItem(t) {
    const li = document.createElement('li');
    li.className = 'turn';
    li.dataset.at = t.at || '';
    if (typeof t.user === 'string' && t.user) {
      const you = document.createElement('div');
      you.className = 'said';
      you.textContent = t.user;
      li.append(you);
    }
    if (typeof t.assistant === 'string' && t.assistant) {
      const reply = document.createElement('div');
      reply.className = 'reply';
      reply.textContent = t.assistant;
      li.append(reply);
    }
    const when = document.createElement('span');
    when.className = 'when';
    when.dataset.at = t.at || '';
    when.textContent = ago(when.dataset.at);
    li.append(when);
    return li;
  }

  function renderMessages(card, s) {
    const ul = $('.messages', card);
    const sent = s.messages.filter((m) => m.kind === 'prompt' && typeof m.text === 'string' && m.text);
    const turns = (s.turns || []).filter((t) => !(typeof t.user === 'string'
      && sent.some((m) => t.user.includes(m.text) && (m.ack_reply || !FINAL.has(m.status)))));
    const items = s.messages.map((m) => ({ at: Date.parse(m.at || m.acked_at || '') || 0, m }))
      .concat(turns.map((t) => ({ at: Date.parse(t.at || '') || 0, t })));
    // Newest first, as the messages come.
    items.sort((a, b) => b.at - a.at);
    ul.replaceChildren(...items.map(({ m, t }) => (t ? turnItem(t) : messageItem(m))));
  }

  function messageItem(m) {
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
    out.textContent = m.status === 'taken' ? 'working on it' : m.status === 'progress' ? 'answering…' : m.status;
    const when = document.createElement('span');
    when.className = 'when';
    when.dataset.at = m.acked_at || m.at || '';
    when.textContent = (FINAL.has(m.status) && m.acked_at ? 'answered ' : 'sent ') + ago(when.dataset.at);
    const detail = document.createElement('span');
    detail.className = 'detail';
    detail.textContent = m.detail || '';
    li.append(what, out, when, detail);
    // The agent's answer to it (DECISIONS 38), as text: never markup.
    if (typeof m.ack_reply === 'string' && m.ack_reply) {
      const reply = document.createElement('div');
      reply.className = 'reply';
      reply.dataset.mode = m.ack_mode || '';
      reply.textContent = m.ack_reply;
      li.append(reply);
    }
    return li;
  }

  // Each open prompt's element lives in the inbox (renderInbox places it); made here.
  function renderAttentions(card, s) {
    const want = new Set(s.attentions.map((a) => a.attention_id));
    for (const [k, el] of prompts) {
      if (el.dataset.sessionKey === s.key && !want.has(el.dataset.attention)) {
        el.remove();
        prompts.delete(k);
      }
    }
    for (const a of s.attentions) {
      if (a.tool) tools.set(a.attention_id, a.tool);
      let el = prompts.get(promptKey(s.key, a.attention_id));
      if (!el) {
        el = $('#attention-tpl').content.firstElementChild.cloneNode(true);
        el.dataset.attention = a.attention_id;
        el.dataset.sessionKey = s.key;
        prompts.set(promptKey(s.key, a.attention_id), el);
        const id = a.attention_id;
        const key = s.key;
        $('.allow', el).addEventListener('click', () => answer(el, key, id, 'allow'));
        $('.allow-session', el).addEventListener('click', () => answer(el, key, id, 'allow', { scope: 'session' }));
        $('.edit-allow', el).addEventListener('click', () => answer(el, key, id, 'allow', { input: editedInput(el) }));
        $('.deny', el).addEventListener('click', () => answer(el, key, id, 'deny'));
        $('.deny-stop', el).addEventListener('click', () => answer(el, key, id, 'deny', { interrupt: true }));
      }
      offerAnswers(el, s, a);
      $('.att-kind', el).textContent = a.kind === 'permission' || !a.kind ? 'Permission' : a.kind;
      $('.att-tool', el).textContent = a.tool || '';
      // The command once (the tool is named above it), and the agent's own word on the call
      // (Claude Code's Bash `description`) beside it, never in its place.
      $('.att-msg', el).textContent = a.tool ? shownCommand(a) : a.message || '';
      // Rule 41: a URL an ACP agent asks the person to open is a link for them to follow;
      // only https, opened with no referrer; the machine never fetches it.
      const url = a.tool === 'open_link' && a.input && typeof a.input.url === 'string' && /^https:\/\//i.test(a.input.url) ? a.input.url : '';
      let link = $('.att-link', el);
      if (!link) {
        link = document.createElement('a');
        link.className = 'att-link';
        link.target = '_blank';
        link.rel = 'noopener noreferrer';
        $('.att-msg', el).after(link);
      }
      link.hidden = !url;
      if (url) link.href = url; else link.removeAttribute('href');
      link.textContent = url ? 'Open ' + short(url, 80) : '';
      const desc = a.input && typeof a.input.description === 'string' ? a.input.description.trim() : '';
      $('.att-desc', el).hidden = !desc;
      $('.att-desc', el).textContent = desc ? 'The agent says: ' + desc : '';
      $('.att-when', el).textContent = a.needed_at ? '· asked ' + ago(a.needed_at) : '';
      // DECISIONS 37: a call the machine masked or cut says so on its face.
      $('.att-hidden', el).hidden = !a.input_partial;
      waitLine(el, s, a);
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

  // DECISIONS 39: how long a prompt waits for the person, in words. A parked one (its
  // headless run ended waiting for it) is answerable until its parked_until, and answering
  // resumes the run; only Claude Code parks, so another agent's prompt says it gives up.
  function waitLine(el, s, a) {
    const until = Date.parse(a.parked_until);
    const parked = Number.isFinite(until);
    $('.att-parked', el).hidden = !parked;
    let text = '';
    if (parked) {
      const when = new Date(until - skew).toLocaleString([], { weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' });
      text = 'The agent stopped to wait for you. Answer any time until ' + when + '; your answer resumes the run.';
    } else if (s.harness !== 'claude-code') {
      text = 'Answer while the agent waits: it gives up waiting for this answer when its wait ends (this agent cannot park a prompt).';
    }
    const w = $('.att-wait', el);
    w.textContent = text;
    w.hidden = !text;
  }

  // A tool whose input is one shell command, which "Edit & allow" lets the person rewrite.
  const SHELL_TOOL = /^(bash|shell|run_shell_command|exec_command|execute|terminal)$/i;

  // The command a prompt shows: the tool's input if the event carried it, else the message
  // without the tool's name in front ("Bash ls" -> "ls").
  function shownCommand(a) {
    if (a.input && typeof a.input.command === 'string') return a.input.command;
    const msg = a.message || '';
    const lead = (a.tool || '') + ' ';
    return a.tool && msg.startsWith(lead) ? msg.slice(lead.length) : msg;
  }

  // Claude Code's AskUserQuestion, the question Codex's model asks under `sp codex`, or an
  // ACP agent's form elicitation through sp-acp (rule 41).
  function isQuestion(a) {
    return a.tool === 'AskUserQuestion' || a.tool === 'request_user_input' || a.tool === 'question';
  }

  // A question's questions ({question, options: [{label}], multiSelect}), if its input came.
  function questionsOf(a) {
    const qs = a.input && Array.isArray(a.input.questions) ? a.input.questions : [];
    return qs.filter((q) => q && typeof q.question === 'string' && Array.isArray(q.options) && q.options.length);
  }

  // DECISIONS 30: only the answers the session's harness honours (its session.started's
  // data.control.answer) are offered; "Allow once" and "Deny" always are.
  function offerAnswers(el, s, a) {
    const can = new Set(s.control && Array.isArray(s.control.answer) ? s.control.answer : []);
    const questions = isQuestion(a) && can.has('answers') ? questionsOf(a) : [];
    // Only a call whose whole input came is offered an edit: the edit replaces the input
    // whole, so one the machine redacted or cut (or never sent) is not (DECISIONS 31).
    const whole = !!a.input && typeof a.input === 'object' && !a.input_partial;
    const shell = SHELL_TOOL.test(a.tool || '') && can.has('input') && whole;
    const plan = isPlan(a);
    const fileField = can.has('input') && whole ? fileEditField(a) : null;
    $('.allow', el).hidden = questions.length > 0;
    $('.allow', el).textContent = plan ? 'Approve' : 'Allow once';
    $('.deny', el).textContent = plan ? 'Keep planning' : 'Deny';
    // A call shown with parts hidden is never allowed for the session (DECISIONS 37).
    // A link (rule 41) is opened or not, once: never for the session.
    $('.allow-session', el).hidden = !can.has('scope') || questions.length > 0 || plan || !!a.input_partial || a.tool === 'open_link';
    $('.edit-allow', el).hidden = !shell && !fileField;
    $('.edit', el).hidden = !shell;
    $('.deny-stop', el).hidden = !can.has('interrupt');
    el.editField = shell ? 'command' : fileField;
    renderDiff(el, a, fileField);
    renderPlan(el, a, plan);
    if (shell && !el.dataset.edited) {
      const field = $('.edit-cmd', el);
      if (document.activeElement !== field) field.value = shownCommand(a);
      field.setAttribute('aria-label', 'Command for ' + (a.tool || 'the tool') + ', edit then Edit & allow');
      el.toolInput = a.input && typeof a.input === 'object' ? a.input : null;
      if (!field.dataset.wired) {
        field.dataset.wired = '1';
        field.addEventListener('input', () => { el.dataset.edited = '1'; });
      }
    }
    renderOptions(el, s.key, a, questions);
  }

  // The tool that presents a plan (Claude Code): Approve allows it, Keep planning denies
  // with the note (DECISIONS 31).
  function isPlan(a) {
    return a.tool === 'ExitPlanMode' && !!a.input && typeof a.input.plan === 'string';
  }

  // A file edit's field the person may rewrite before allowing: the new text of an Edit,
  // the content of a Write; null for anything else.
  function fileEditField(a) {
    const i = a.input;
    if (!i || typeof i.file_path !== 'string') return null;
    if (typeof i.new_string === 'string' && typeof i.old_string === 'string') return 'new_string';
    if (typeof i.content === 'string') return 'content';
    return null;
  }

  // The whole input of the call with the person's edit in it, so nothing else of the call
  // is lost (DECISIONS 30 `input` replaces the model's input whole).
  function editedInput(el) {
    const base = Object.assign({}, el.toolInput || {});
    if (el.editField === 'command') base.command = $('.edit-cmd', el).value;
    else if (el.editField) base[el.editField] = $('.edit-text', el).value;
    return base;
  }

  // Lines of `a` and `b` as a unified list of [' '|'-'|'+', line], by their longest common
  // subsequence; past 400 lines a side, all of `a` removed and all of `b` added.
  function lineDiff(a, b) {
    const x = a === '' ? [] : a.split('\n');
    const y = b === '' ? [] : b.split('\n');
    if (x.length > 400 || y.length > 400) {
      return x.map((l) => ['-', l]).concat(y.map((l) => ['+', l]));
    }
    const n = x.length;
    const m = y.length;
    const t = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        t[i][j] = x[i] === y[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push([' ', x[i]]); i++; j++; }
      else if (t[i + 1][j] >= t[i][j + 1]) out.push(['-', x[i++]]);
      else out.push(['+', y[j++]]);
    }
    while (i < n) out.push(['-', x[i++]]);
    while (j < m) out.push(['+', y[j++]]);
    return out;
  }

  // A file edit as a diff (DECISIONS 31): an Edit's old and new text, a Write's content
  // as added lines; with `field`, a box to rewrite the new text before Edit & allow.
  function renderDiff(el, a, field) {
    const box = $('.diff', el);
    const i = a.input || {};
    let pairs = [];
    if (typeof i.file_path === 'string' && typeof i.new_string === 'string') {
      pairs = [[typeof i.old_string === 'string' ? i.old_string : '', i.new_string]];
    } else if (typeof i.file_path === 'string' && Array.isArray(i.edits)) {
      pairs = i.edits.filter((e) => e && typeof e.new_string === 'string')
        .map((e) => [typeof e.old_string === 'string' ? e.old_string : '', e.new_string]);
    } else if (typeof i.file_path === 'string' && typeof i.content === 'string') {
      pairs = [['', i.content]];
    }
    box.hidden = pairs.length === 0;
    const label = $('.edit-file', el);
    label.hidden = !field;
    if (field && !el.dataset.edited) {
      const text = $('.edit-text', el);
      if (document.activeElement !== text) text.value = i[field];
      el.toolInput = i;
      if (!text.dataset.wired) {
        text.dataset.wired = '1';
        text.addEventListener('input', () => { el.dataset.edited = '1'; });
      }
    }
    const sig = JSON.stringify(pairs);
    if (box.dataset.sig === sig) return;
    box.dataset.sig = sig;
    const head = document.createElement('div');
    head.className = 'diff-file';
    head.textContent = i.file_path || '';
    const lines = [];
    for (const [o, n] of pairs) {
      for (const [mark, line] of lineDiff(o, n)) {
        const span = document.createElement('span');
        span.className = mark === '+' ? 'add' : mark === '-' ? 'del' : 'ctx';
        span.textContent = mark + ' ' + line + '\n';
        lines.push(span);
      }
    }
    if (i.replace_all === true) {
      const note = document.createElement('div');
      note.className = 'diff-file';
      note.textContent = 'every occurrence';
      lines.push(note);
    }
    box.replaceChildren(head, ...lines);
    if (a.input_partial) box.title = 'Shortened or redacted by the machine';
  }

  // A plan as text (DECISIONS 31); the buttons say Approve and Keep planning.
  function renderPlan(el, a, plan) {
    const box = $('.plan', el);
    box.hidden = !plan;
    if (plan && box.textContent !== a.input.plan) box.textContent = a.input.plan;
  }

  // A question's options as buttons: one pick per question (checkboxes for a
  // multi-select), or a free answer typed in; the answer goes once every question has one.
  function renderOptions(el, session, a, questions) {
    const box = $('.options', el);
    box.hidden = questions.length === 0;
    const sig = JSON.stringify(questions);
    if (box.dataset.sig === sig) return;
    box.dataset.sig = sig;
    const picks = new Map();
    const free = new Map();
    const send = document.createElement('button');
    send.type = 'button';
    send.className = 'send-answers';
    send.textContent = 'Send answers';
    send.disabled = true;
    // A free answer stands for the question's pick (a multi-select's is one more label).
    const chosen = (q) => {
      const p = picks.get(q.question) || [];
      const f = (free.get(q.question) || '').trim();
      if (!f) return p;
      return q.multiSelect ? p.concat([f]) : [f];
    };
    const ready = () => questions.every((q) => chosen(q).length > 0);
    const answers = () => {
      const o = {};
      for (const q of questions) {
        const p = chosen(q);
        o[q.question] = q.multiSelect ? p : p[0];
      }
      return o;
    };
    send.addEventListener('click', () => answer(el, session, a.attention_id, 'allow', { answers: answers() }));
    const sets = questions.map((q) => {
      const fs = document.createElement('fieldset');
      const lg = document.createElement('legend');
      lg.textContent = q.question;
      const row = document.createElement('div');
      row.className = 'row';
      const other = document.createElement('input');
      other.type = 'text';
      other.className = 'free';
      other.maxLength = 2000;
      other.placeholder = 'Or type an answer';
      other.setAttribute('aria-label', 'Your own answer to: ' + q.question);
      other.addEventListener('input', () => {
        free.set(q.question, other.value);
        send.disabled = !ready();
      });
      for (const o of q.options) {
        const label = o && typeof o.label === 'string' ? o.label : String(o);
        if (q.multiSelect) {
          const box = document.createElement('label');
          box.className = 'check';
          const c = document.createElement('input');
          c.type = 'checkbox';
          c.value = label;
          if (o && typeof o.description === 'string') box.title = o.description;
          c.addEventListener('change', () => {
            const p = (picks.get(q.question) || []).filter((x) => x !== label);
            picks.set(q.question, c.checked ? p.concat([label]) : p);
            send.disabled = !ready();
          });
          box.append(c, document.createTextNode(' ' + label));
          row.append(box);
          continue;
        }
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'option';
        b.textContent = label;
        if (o && typeof o.description === 'string') b.title = o.description;
        b.setAttribute('aria-pressed', 'false');
        b.addEventListener('click', () => {
          const p = [label];
          for (const each of row.children) each.setAttribute('aria-pressed', 'false');
          // A tapped option is the answer, not a free one typed before.
          other.value = '';
          free.delete(q.question);
          picks.set(q.question, p);
          b.setAttribute('aria-pressed', String(p.includes(label)));
          // A single question with one pick is answered by the tap itself.
          if (questions.length === 1 && !q.multiSelect) {
            answer(el, session, a.attention_id, 'allow', { answers: answers() });
          }
          send.disabled = !ready();
        });
        row.append(b);
      }
      fs.append(lg, row, other);
      return fs;
    });
    box.replaceChildren(...sets, send);
  }

  async function answer(el, session, id, decision, extra) {
    const status = $('.att-status', el);
    el.dataset.busy = '1';
    for (const b of el.querySelectorAll('button')) b.disabled = true;
    status.classList.remove('error');
    status.textContent = 'Sending…';
    try {
      const note = $('.note', el).value.trim();
      const m = Object.assign({ kind: 'permission.answer', for: id, decision }, extra || {});
      if (note) m.note = note;
      answeredHere.add(id);
      await enqueue(session, m);
      status.textContent = (decision === 'allow' ? 'Allow' : 'Deny') + ' sent, waiting for the machine…';
      return true;
    } catch (e) {
      status.classList.add('error');
      status.textContent = 'Not sent: ' + e.message;
      for (const b of el.querySelectorAll('button')) b.disabled = false;
      return false;
    } finally {
      delete el.dataset.busy;
    }
  }

  // When a control word takes effect in a session, as its session.started says, in words.
  const WHEN = { now: 'at once', tool_boundary: 'once the current tool is done', turn_end: 'when the turn ends', no: 'no' };

  // An ACP session is named for its agent ("Gemini CLI (ACP)"); its harness is always acp.
  function harnessLabel(s) {
    return s.harness === 'acp' ? (s.agent || 'ACP agent') + ' (ACP)' : s.harness;
  }

  function controlLine(c) {
    if (!c || typeof c !== 'object') return '';
    const p = c.prompt || {};
    const bits = [];
    const say = (label, when) => {
      if (!WHEN[when]) return;
      bits.push(when === 'no' ? label + ' does not reach this agent' : label + ' reaches it ' + WHEN[when]);
    };
    say('Send now', p.steer);
    say('Interrupt', p.interrupt);
    say('Stop', c.cancel);
    return bits.length ? bits.join('; ') + '.' : '';
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
      // Which button: After this turn (queue), Send now (steer) or Interrupt.
      const mode = (ev.submitter && ev.submitter.value) || 'queue';
      const btns = form.querySelectorAll('button[type=submit]');
      for (const b of btns) b.disabled = true;
      try {
        const m = { kind: 'prompt', text: t };
        if (mode !== 'queue') m.mode = mode;
        // Read before the wait: what the button said when it was pressed.
        const resumes = mode === 'queue' && card.dataset.resumes === '1';
        await enqueue(key, m);
        text.value = '';
        say(resumes ? 'Sent: the machine resumes the session with it.' : MODE_SENT[mode]);
      } catch (e) {
        say('Not sent: ' + e.message, true);
      } finally {
        for (const b of btns) b.disabled = false;
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

  // DECISIONS 40: what a session is doing, in words (an older receiver sends no status).
  const STATUS = { working: 'working', idle: 'idle', waiting: 'waiting for you', parked: 'parked', ended: 'ended' };
  function statusOf(s) {
    if (STATUS[s.status]) return s.status;
    if (s.attentions.length) return 'waiting';
    return s.state === 'ended' ? 'ended' : s.state === 'idle' || s.state === 'started' ? 'idle' : 'working';
  }
  // The message box works whatever the state: what its first button does, in words.
  const RESUMES = new Set(['idle', 'ended', 'parked']);
  function updateCompose(card, status) {
    const q = $('button.queue', card);
    const resumes = RESUMES.has(status);
    q.textContent = resumes ? 'Send' : 'After this turn';
    q.title = resumes ? 'The agent is not working: the machine resumes this session with your message'
      : 'Deliver when the agent\'s turn ends';
    card.dataset.resumes = resumes ? '1' : '';
  }

  function updateCard(card, s) {
    card.classList.toggle('needs', s.attentions.length > 0);
    $('.title', card).textContent = sessionTitle(s);
    const status = statusOf(s);
    const st = $('.state', card);
    st.textContent = STATUS[status];
    st.dataset.state = status;
    const doing = $('.doing', card);
    const tool = s.tool && typeof s.tool.tool === 'string' ? s.tool : null;
    doing.textContent = tool ? 'Running ' + tool.tool + (typeof tool.summary === 'string' && tool.summary ? ': ' + short(tool.summary, 80) : '') : '';
    doing.hidden = !tool;
    updateCompose(card, status);
    // Never an internal id (a session id, a prompt id): the folder, branch and machine say which.
    const bits = [harnessLabel(s)];
    if (s.branch) bits.push(s.branch);
    if (s.machine) bits.push(s.machine);
    // The mode the agent last reported, so a person knows why no prompt comes (auto, …).
    if (typeof s.permission_mode === 'string' && s.permission_mode) {
      bits.push('mode ' + short(s.permission_mode, 40) + (ASKS_FIRST.has(s.permission_mode) ? '' : ' (runs tools without asking)'));
    }
    bits.push('last event ' + ago(s.last_at));
    $('.meta', card).textContent = bits.join(' · ');
    let ctl = $('.control', card);
    if (!ctl) {
      ctl = document.createElement('p');
      ctl.className = 'meta control';
      $('.meta', card).after(ctl);
    }
    ctl.textContent = controlLine(s.control);
    ctl.hidden = !ctl.textContent;
    renderMessages(card, s);
    renderAttentions(card, s);
    renderCleared(card, s);
  }

  // ---- Answered elsewhere (DECISIONS 34) ----------------------------------------------
  // A prompt this page showed that has ended (state.sessions[].cleared, newest first) is
  // dropped by renderAttentions; here the page says in one line how it ended.
  const shownOpen = new Set(); // attention ids this page showed open
  const answeredHere = new Set(); // attention ids this page sent an answer for
  const ENDED = {
    terminal: 'answered in the terminal',
    timeout: 'timed out: nobody answered',
    cancelled: 'ended with the session',
    unknown: 'ended',
  };
  function renderCleared(card, s) {
    for (const a of s.attentions) shownOpen.add(a.attention_id);
    let ul = $('.cleared', card);
    if (!ul) {
      ul = document.createElement('ul');
      ul.className = 'cleared';
      $('.attentions', card).after(ul);
    }
    // A prompt nobody answered stays listed, on a page opened (or reloaded) after it too.
    const ended = (s.cleared || []).filter((c) => shownOpen.has(c.attention_id) || c.ended === 'timeout');
    ul.replaceChildren(...ended.map((c) => {
      const li = document.createElement('li');
      li.dataset.cleared = c.attention_id;
      li.dataset.ended = c.ended;
      const how = c.ended === 'page'
        ? (answeredHere.has(c.attention_id) ? 'answered here' : 'answered from another device')
        : ENDED[c.ended] || 'ended';
      li.textContent = short((c.tool ? c.tool + ' · ' : '') + (c.message || 'a prompt'), 60) + ' — ' + how + ' ' + ago(c.cleared_at);
      return li;
    }));
    ul.hidden = ended.length === 0;
  }

  function render(state) {
    current = state;
    version = state.version;
    if (state.csrf) csrf = state.csrf;
    skew = Date.parse(state.now) - Date.now();
    const away = $('#away');
    if (away.dataset.busy !== '1') away.checked = !!state.away;
    const paired = pairedMachines(state);
    const badge = $('#signed');
    badge.hidden = paired.length === 0;
    badge.title = paired.length ? 'Answers are signed on this device for the machine of each session: ' + paired.map((m) => (m.name || m.machine) + ' (' + m.machine + ')').join(', ') : '';
    const list = $('#sessions');
    // One group per machine: the paired machine its events came with (DECISIONS 33), else
    // the name its events carry; a session that needs you first.
    const pairedById = new Map(paired.map((m) => [m.machine, m]));
    const machineOf = (s) => (s.machine_id && pairedById.has(s.machine_id) ? 'id:' + s.machine_id : 'name:' + (s.machine || 'unnamed machine'));
    const machineLabel = (s) => {
      const m = s.machine_id && pairedById.get(s.machine_id);
      return m ? m.name || s.machine || m.machine : s.machine || 'unnamed machine';
    };
    const sessions = [...state.sessions].sort((a, b) =>
      machineOf(a).localeCompare(machineOf(b)) ||
      (b.attentions.length > 0) - (a.attentions.length > 0));
    const keep = new Set(sessions.map((s) => s.key));
    for (const [k, el] of cards) {
      if (!keep.has(k)) {
        el.remove();
        cards.delete(k);
      }
    }
    const grouped = new Set(sessions.map(machineOf)).size > 1 || paired.length > 1;
    const want = [];
    let last = null;
    for (const s of sessions) {
      if (grouped && machineOf(s) !== last) {
        last = machineOf(s);
        let h = headings.get(last);
        if (!h) {
          h = document.createElement('h2');
          h.className = 'machine';
          headings.set(last, h);
        }
        fillMachineHeading(h, machineLabel(s), s.machine_id && pairedById.get(s.machine_id));
        want.push(h);
      }
      let card = cards.get(s.key);
      if (!card) {
        card = createCard(s.key);
        cards.set(s.key, card);
      }
      updateCard(card, s);
      want.push(card);
    }
    for (const [m, h] of headings) {
      if (!want.includes(h)) {
        h.remove();
        headings.delete(m);
      }
    }
    // Move only when out of place, so a card being typed in keeps its focus.
    want.forEach((el, i) => {
      if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
    });
    renderInbox(state);
    renderStarts(state);
    $('#empty').hidden = sessions.length > 0;
    if (focusAttention) {
      const el = document.querySelector('[data-attention="' + CSS.escape(focusAttention) + '"]');
      if (el) {
        el.scrollIntoView({ block: 'center' });
        el.classList.add('focused');
        focusAttention = null;
      }
    }
  }

  // ---- Starting a session (DECISIONS 39) -------------------------------------------------
  // Each paired machine whose hello said what it can start gets a New session form. Start is
  // signed by a touch (rule 36) for that machine; the session is named here (a new uuid), so
  // the page shows it as working at once and follows the start's ack until the agent's own
  // events take over. The machine checks everything again and is the gate.
  const AGENTS = { 'claude-code': 'Claude Code', codex: 'Codex' };
  const FILE_MAX = 8 << 20; // the receiver's cap on one file
  const startForms = new Map(); // machine id -> its element
  const started = new Map(); // session key -> {machine, text, id, ack, error}

  // A start's end, in words: a refusal says why (its code is for machines, not people).
  const START_WORDS = {
    folder: 'Not started: that folder is not one this machine allows (control.folders).',
    start_limit: 'Not started: this machine is already running or has started as many sessions as its limit allows (control.start_limit).',
    file: 'Not started: a file could not be fetched or did not match what was signed, so nothing ran.',
  };
  function startOutcome(ack) {
    if (ack.outcome === 'delivered') return 'Started; the agent answered.';
    if (ack.code && START_WORDS[ack.code]) return START_WORDS[ack.code];
    if (ack.outcome === 'unsupported') return 'Not started: this machine cannot start that agent.';
    if (ack.outcome === 'expired') return 'Not started: the machine did not take it in time.';
    if (ack.outcome === 'refused') return 'Not started: the machine refused it.';
    return 'The run failed.';
  }

  async function followStart(key) {
    const st = started.get(key);
    for (let i = 0; i < 900 && st && !st.ack; i++) {
      await new Promise((r) => setTimeout(r, 2000));
      try {
        const r = await fetch('/page/api/signed/ack?id=' + encodeURIComponent(st.id), { credentials: 'same-origin', cache: 'no-store' });
        if (r.ok) {
          const j = await r.json();
          if (j.ack) st.ack = j.ack;
        }
      } catch (_) { /* offline: the next round tries again */ }
      if (current) renderStarts(current);
    }
  }

  function renderStarted(ul, machine, state) {
    const live = new Set((state.sessions || []).map((s) => s.key));
    const items = [];
    for (const [key, st] of started) {
      if (st.machine !== machine) continue;
      // Once its session reports events and nothing went wrong, its card takes over.
      if (live.has(key) && !(st.ack && st.ack.outcome !== 'delivered')) continue;
      const li = document.createElement('li');
      li.className = 'session started-session';
      li.dataset.session = key;
      const what = document.createElement('span');
      what.className = 'what';
      what.textContent = short(st.text, 60);
      const state_ = document.createElement('span');
      state_.className = 'state';
      const done = !!st.ack;
      const ok = done && st.ack.outcome === 'delivered';
      state_.textContent = !done ? 'working' : ok ? 'done' : 'not started';
      state_.dataset.state = state_.textContent;
      const detail = document.createElement('p');
      detail.className = 'detail' + (done && !ok ? ' error' : '');
      detail.dataset.code = (st.ack && st.ack.code) || '';
      detail.textContent = !done ? 'Starting on the machine…' : startOutcome(st.ack) + (st.ack.detail ? ' ' + short(st.ack.detail, 300) : '');
      li.append(what, state_, detail);
      if (ok && typeof st.ack.reply === 'string' && st.ack.reply) {
        const reply = document.createElement('div');
        reply.className = 'reply';
        reply.textContent = st.ack.reply;
        li.append(reply);
      }
      items.push(li);
    }
    ul.replaceChildren(...items);
  }

  function startForm(m) {
    const el = $('#start-tpl').content.firstElementChild.cloneNode(true);
    el.dataset.machine = m.machine;
    const form = $('.start-form', el);
    const open = $('.new-session', el);
    const status = $('.start-status', el);
    const say = (msg, bad) => {
      status.textContent = msg;
      status.classList.toggle('error', !!bad);
    };
    open.addEventListener('click', () => {
      form.hidden = !form.hidden;
      open.setAttribute('aria-expanded', String(!form.hidden));
      if (!form.hidden) $('.start-text', el).focus();
    });
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const text = $('.start-text', el).value;
      if (!text.trim()) return say('Write a message first.', true);
      const picked = [...$('.start-files', el).files];
      if (picked.length > 10) return say('At most 10 files with one start.', true);
      const big = picked.find((f) => f.size > FILE_MAX || f.size === 0);
      if (big) return say(big.name + ' cannot go: a file is 1 byte to 8 MB here.', true);
      const go = $('.start-go', el);
      go.disabled = true;
      const harness = $('.start-agent', el).value;
      const key = 'claude-code:' + crypto.randomUUID();
      const msg = { kind: 'start', text, cwd: $('.start-folder', el).value };
      if (harness !== 'claude-code') msg.harness = harness;
      try {
        // Each file is kept by the receiver for this machine only; the start names it by
        // its SHA-256, which the machine checks before writing it.
        if (picked.length) msg.files = [];
        for (const f of picked) {
          say('Uploading ' + f.name + '…');
          const r = await fetch('/page/api/files?machine=' + encodeURIComponent(m.machine), {
            method: 'POST',
            credentials: 'same-origin',
            cache: 'no-store',
            headers: { 'content-type': 'application/octet-stream', 'x-sessionpipe-csrf': csrf },
            body: f,
          });
          const j = await r.json().catch(() => ({}));
          if (!r.ok) throw new Error(f.name + ': ' + (j.reason || 'HTTP ' + r.status));
          msg.files.push({ name: f.name, type: f.type || 'application/octet-stream', size: j.size, sha256: j.sha256 });
        }
        say('Touch your passkey to start…');
        const sg = current && current.signing;
        const env = await sendSigned({ rp_id: sg.rp_id, machine: m.machine, name: m.name }, key, msg);
        started.set(key, { machine: m.machine, text, id: env.id, ack: null });
        $('.start-text', el).value = '';
        form.hidden = true;
        open.setAttribute('aria-expanded', 'false');
        say('');
        renderStarts(current);
        followStart(key);
      } catch (e) {
        say('Not started: ' + e.message, true);
      } finally {
        go.disabled = false;
      }
    });
    return el;
  }

  function fillOptions(sel, values, label) {
    const want = values.join('\n');
    if (sel.dataset.values === want) return;
    sel.dataset.values = want;
    sel.replaceChildren(...values.map((v) => {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = label(v);
      return o;
    }));
  }

  function renderStarts(state) {
    const box = $('#starts');
    const can = pairedMachines(state).filter((m) => m.can_start && Array.isArray(m.can_start.harnesses) &&
      m.can_start.harnesses.length > 0 && Array.isArray(m.can_start.folders) && m.can_start.folders.length > 0);
    const keep = new Set(can.map((m) => m.machine));
    for (const [id, el] of startForms) {
      if (!keep.has(id)) {
        el.remove();
        startForms.delete(id);
      }
    }
    for (const m of can) {
      let el = startForms.get(m.machine);
      if (!el) {
        el = startForm(m);
        startForms.set(m.machine, el);
        box.append(el);
      }
      $('.start-name', el).textContent = m.name || m.machine;
      fillOptions($('.start-agent', el), m.can_start.harnesses.filter((h) => typeof h === 'string'), (h) => AGENTS[h] || h);
      fillOptions($('.start-folder', el), m.can_start.folders.filter((f) => typeof f === 'string'), (f) => f);
      $('.start-files', el).closest('label').hidden = !m.can_start.files;
      renderStarted($('.started', el), m.machine, state);
    }
    box.hidden = can.length === 0;
  }

  // ---- The inbox (issue 26): every open prompt across machines and sessions, oldest first;
  // identical ones (same tool, same input) as one group; batch answers; "Not now". --------

  const prompts = new Map(); // promptKey -> the prompt's element (attention-tpl)
  const promptKey = (session, id) => session + '\n' + id;
  const items = new Map(); // promptKey -> its inbox item (where, tick box, Not now, the prompt)
  const groups = new Map(); // sameness -> the group of identical prompts
  const selected = new Set(); // promptKeys ticked
  let shownCount = -1;

  // What makes prompts the same: the tool and the machine's hash of its exact input, never
  // what is shown (two calls can look alike once masked or cut). A question, or a call shown
  // with parts hidden or without its hash, is never the same as another (DECISIONS 37).
  function sameness(a) {
    if (isQuestion(a) || a.input_partial || typeof a.input_sha256 !== 'string') return null;
    return (a.tool || '') + '\n' + a.input_sha256;
  }

  // Every open prompt: {key, s, a, off}, oldest first (off: put off with Not now).
  function openPrompts(state) {
    const off = new Set((state.snoozed || []).map((z) => promptKey(z.session, z.for)));
    const all = [];
    for (const s of state.sessions) {
      for (const a of s.attentions) {
        const key = promptKey(s.key, a.attention_id);
        all.push({ key, s, a, off: off.has(key) });
      }
    }
    const t = (p) => Date.parse(p.a.needed_at) || 0;
    all.sort((x, y) => t(x) - t(y) || (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
    return all;
  }

  function whereOf(s) {
    return (s.machine || 'unnamed machine') + ' · ' + (s.cwd || s.repo || sessionTitle(s));
  }

  function updateItem(p) {
    let it = items.get(p.key);
    if (!it) {
      it = $('#inbox-item-tpl').content.firstElementChild.cloneNode(true);
      it.dataset.session = p.s.key;
      it.dataset.for = p.a.attention_id;
      const box = $('.select', it);
      box.addEventListener('change', () => {
        if (box.checked) selected.add(p.key); else selected.delete(p.key);
        if (current) renderInbox(current);
      });
      $('.not-now', it).addEventListener('click', () => putOff([p.key], $('.att-status', prompts.get(p.key) || it)));
      items.set(p.key, it);
    }
    $('.where', it).textContent = whereOf(p.s);
    $('.select', it).checked = selected.has(p.key);
    $('.select', it).setAttribute('aria-label', 'Select ' + (p.a.tool || 'prompt') + ' on ' + whereOf(p.s));
    const el = prompts.get(p.key);
    if (el && el.parentNode !== it) it.append(el);
    return it;
  }

  function updateGroup(same, members) {
    let g = groups.get(same);
    if (!g) {
      g = $('#inbox-group-tpl').content.firstElementChild.cloneNode(true);
      const box = $('.select-group', g);
      box.addEventListener('change', () => {
        for (const k of g.memberKeys) if (box.checked) selected.add(k); else selected.delete(k);
        if (current) renderInbox(current);
      });
      const say = $('.group-status', g);
      $('.allow-all', g).addEventListener('click', () => answerAll(g.memberKeys, 'allow', say));
      $('.deny-all', g).addEventListener('click', () => answerAll(g.memberKeys, 'deny', say));
      $('.not-now', g).addEventListener('click', () => putOff(g.memberKeys, say));
      groups.set(same, g);
    }
    const a = members[0].a;
    g.memberKeys = members.map((m) => m.key);
    g.dataset.count = String(members.length);
    $('.count', g).textContent = members.length + ' ×';
    $('.same', g).textContent = shownCommand(a) || a.tool || 'prompt';
    $('.group-tool', g).textContent = a.tool || '';
    // Where they wait, at a glance (each one's own line is under "Each of the N").
    const places = [...new Set(members.map((m) => whereOf(m.s)))];
    $('.group-where', g).textContent = places.slice(0, 3).join('; ') + (places.length > 3 ? '; and ' + (places.length - 3) + ' more' : '');
    $('.allow-all', g).textContent = 'Allow all ' + members.length;
    $('.deny-all', g).textContent = 'Deny all ' + members.length;
    $('.select-group', g).checked = members.every((m) => selected.has(m.key));
    const list = $('.members', g);
    members.forEach((m, i) => {
      const it = items.get(m.key);
      if (list.children[i] !== it) list.insertBefore(it, list.children[i] || null);
      if (focusAttention && m.a.attention_id === focusAttention) $('details', g).open = true;
    });
    while (list.children.length > members.length) list.lastElementChild.remove();
    $('.summary-count', g).textContent = 'Each of the ' + members.length;
    return g;
  }

  function renderInbox(state) {
    const all = openPrompts(state);
    const live = new Set(all.map((p) => p.key));
    for (const [k, el] of prompts) {
      if (!live.has(k)) {
        el.remove();
        prompts.delete(k);
      }
    }
    for (const [k, it] of items) {
      if (!live.has(k)) {
        it.remove();
        items.delete(k);
      }
    }
    for (const k of [...selected]) if (!live.has(k)) selected.delete(k);
    const shown = all.filter((p) => !p.off);
    const off = all.filter((p) => p.off);
    for (const p of off) {
      selected.delete(p.key);
      const it = items.get(p.key);
      if (it) it.remove();
    }
    const bySame = new Map();
    for (const p of shown) {
      const same = sameness(p.a);
      if (same === null) continue;
      if (!bySame.has(same)) bySame.set(same, []);
      bySame.get(same).push(p);
    }
    // One entry per prompt, or per group of identical ones at the place of its oldest.
    const want = [];
    const placed = new Set();
    const keepGroups = new Set();
    for (const p of shown) {
      if (placed.has(p.key)) continue;
      const same = sameness(p.a);
      const members = same !== null && bySame.get(same).length > 1 ? bySame.get(same) : [p];
      for (const m of members) {
        placed.add(m.key);
        updateItem(m);
      }
      if (members.length > 1) {
        keepGroups.add(same);
        want.push(updateGroup(same, members));
      } else {
        want.push(items.get(p.key));
      }
    }
    for (const [same, g] of groups) {
      if (!keepGroups.has(same)) {
        g.remove();
        groups.delete(same);
      }
    }
    const list = $('#inbox-list');
    want.forEach((el, i) => {
      if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
    });
    while (list.children.length > want.length) list.lastElementChild.remove();
    $('#inbox').hidden = all.length === 0;
    $('#inbox-count').textContent = shown.length ? '(' + shown.length + ')' : '';
    $('#inbox').dataset.count = String(shown.length);
    const later = $('#inbox-later');
    later.hidden = off.length === 0;
    if (off.length) {
      const back = Math.min(...(state.snoozed || []).map((z) => Date.parse(z.until)).filter(Number.isFinite));
      const when = Number.isFinite(back) ? new Date(back - skew).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : '';
      $('#inbox-later-text').textContent = off.length + (off.length === 1 ? ' prompt' : ' prompts') + ' put off with Not now' + (when ? '; back at ' + when : '') + '. The machine still waits.';
      laterKeys = off.map((p) => p.key);
    }
    // A session's card points up here rather than holding its prompts.
    const per = new Map();
    for (const p of shown) per.set(p.s.key, (per.get(p.s.key) || 0) + 1);
    for (const [k, card] of cards) {
      const n = per.get(k) || 0;
      $('.attentions', card).textContent = n ? (n === 1 ? '1 prompt waits' : n + ' prompts wait') + ' in the inbox above.' : '';
    }
    renderBatch();
    showCount(shown.length);
  }

  // The number of open prompts in the title, and on the installed page's app badge.
  function showCount(n) {
    document.title = n ? '(' + n + ') sessionpipe' : 'sessionpipe';
    if (n === shownCount) return;
    shownCount = n;
    try {
      if (n && navigator.setAppBadge) navigator.setAppBadge(n).catch(() => {});
      else if (!n && navigator.clearAppBadge) navigator.clearAppBadge().catch(() => {});
    } catch (e) { /* no badge here */ }
  }

  function renderBatch() {
    const bar = $('#inbox-batch');
    const keys = [...selected];
    bar.hidden = keys.length === 0;
    $('#batch-count').textContent = keys.length + ' selected';
    // Allow all only where every selected prompt is the same call.
    const open = new Map(current ? openPrompts(current).map((p) => [p.key, p]) : []);
    const sames = new Set(keys.map((k) => (open.has(k) ? sameness(open.get(k).a) : null)));
    const allow = $('#batch-allow');
    allow.disabled = !(sames.size === 1 && !sames.has(null));
    allow.title = allow.disabled ? 'Allow all needs the same tool and input in every selected prompt' : '';
  }

  // In the signed mode the prompts of one session go as ONE batch command (`for` an array of
  // at most 50 attention ids, DECISIONS 36): an allow is then one touch over that command,
  // not one per prompt; a batch is per session (the command names one session), so a group
  // spanning n sessions asks for n touches. Unsigned, or a lone prompt: one command each.
  async function answerAll(keys, decision, status) {
    const list = [...keys].filter((k) => prompts.get(k));
    const bySession = new Map();
    for (const k of list) {
      const el = prompts.get(k);
      const s = el.dataset.sessionKey;
      if (!bySession.has(s)) bySession.set(s, []);
      bySession.get(s).push(k);
    }
    let sent = 0;
    status.classList.remove('error');
    status.textContent = 'Sending ' + list.length + '…';
    const stop = (why) => {
      status.classList.add('error');
      status.textContent = 'Stopped: ' + sent + ' of ' + list.length + ' sent; ' + why;
    };
    for (const [session, ks] of bySession) {
      if (!signingFor(session) || ks.length === 1) {
        for (const k of ks) {
          const el = prompts.get(k);
          if (!el) continue;
          if (!(await answer(el, session, el.dataset.attention, decision))) return stop($('.att-status', el).textContent || 'one was not sent');
          sent++;
          selected.delete(k);
        }
        continue;
      }
      for (let i = 0; i < ks.length; i += BATCH_MAX) {
        const part = ks.slice(i, i + BATCH_MAX);
        const els = part.map((k) => prompts.get(k)).filter(Boolean);
        const ids = els.map((el) => el.dataset.attention);
        for (const id of ids) answeredHere.add(id);
        try {
          await enqueue(session, { kind: 'permission.answer', for: ids, decision });
        } catch (e) {
          return stop(e.message);
        }
        for (const el of els) $('.att-status', el).textContent = (decision === 'allow' ? 'Allow' : 'Deny') + ' sent, waiting for the machine…';
        sent += els.length;
        for (const k of part) selected.delete(k);
      }
    }
    status.textContent = (decision === 'allow' ? 'Allow' : 'Deny') + ' sent for ' + sent + ', waiting for the machines…';
    if (current) renderInbox(current);
  }

  // Not now: hidden on every page and not pushed for a while (the receiver keeps the time);
  // the machine keeps waiting, nothing is answered.
  async function putOff(keys, status) {
    const list = [...keys].map((k) => {
      const [session, id] = k.split('\n');
      return { session, for: id };
    });
    if (!list.length) return;
    try {
      const r = await post('/page/api/snooze', { prompts: list.slice(0, 200) });
      for (const k of keys) selected.delete(k);
      if (status) {
        status.classList.remove('error');
        status.textContent = r.snoozed && r.snoozed.length ? 'Put off.' : 'Already gone.';
      }
    } catch (e) {
      if (status) {
        status.classList.add('error');
        status.textContent = 'Not put off: ' + e.message;
      }
    }
  }

  // "Show again": the prompts put off come back at once, on every page.
  let laterKeys = [];
  async function showAgain() {
    const list = laterKeys.map((k) => {
      const [session, id] = k.split('\n');
      return { session, for: id };
    });
    if (!list.length) return;
    try {
      await post('/page/api/snooze', { prompts: list.slice(0, 200), undo: true });
    } catch (e) {
      $('#inbox-later-text').textContent = 'Not shown again: ' + e.message;
    }
  }

  function setupInbox() {
    $('#show-again').addEventListener('click', showAgain);
    const say = $('#batch-status');
    $('#batch-allow').addEventListener('click', () => answerAll(selected, 'allow', say));
    $('#batch-deny').addEventListener('click', () => answerAll(selected, 'deny', say));
    $('#batch-later').addEventListener('click', () => putOff([...selected], say));
    $('#batch-clear').addEventListener('click', () => {
      selected.clear();
      if (current) renderInbox(current);
    });
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ---- Notifications (sp-receiver's push.rs): Web Push to this device, ntfy, the log ----

  function b64uToBytes(s) {
    const b = atob(s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4));
    return Uint8Array.from(b, (c) => c.charCodeAt(0));
  }

  async function getJson(path) {
    const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
    if (!r.ok) throw new Error('HTTP ' + r.status);
    return r.json();
  }

  async function refreshNotifications() {
    let p;
    try { p = await getJson('/page/api/push'); } catch (e) { return; }
    const ul = $('#devices');
    ul.replaceChildren(...p.devices.map((d) => {
      const li = document.createElement('li');
      li.dataset.device = d.id;
      const name = document.createElement('span');
      name.className = 'what';
      name.textContent = (d.name || 'a device') + ' · ' + d.service;
      const quiet = document.createElement('label');
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.className = 'quiet';
      box.checked = !!d.quiet;
      box.addEventListener('change', () => post('/page/api/push', { op: 'quiet', id: d.id, quiet: box.checked }).catch(() => {}));
      quiet.append(box, ' quiet');
      const hours = quietHoursForm(d);
      const rm = document.createElement('button');
      rm.type = 'button';
      rm.className = 'link remove';
      rm.textContent = 'Remove';
      rm.addEventListener('click', async () => {
        await post('/page/api/push', { op: 'remove', id: d.id }).catch(() => {});
        refreshNotifications();
      });
      li.append(name, quiet, hours, rm);
      return li;
    }));
    if (p.ntfy && document.activeElement !== $('#ntfy-url')) $('#ntfy-url').value = p.ntfy.url;
    $('#ntfy-token').placeholder = p.ntfy && p.ntfy.token ? 'a token is saved' : 'optional';
    if (document.activeElement !== $('#ntfy-content')) $('#ntfy-content').checked = !!(p.ntfy && p.ntfy.content);
    $('#push-log').replaceChildren(...p.log.slice(0, 10).map((l) => {
      const li = document.createElement('li');
      li.textContent = ago(l.at) + ' · ' + l.what + ' → ' + l.target + ': ' + l.result;
      return li;
    }));
    return p;
  }

  // Quiet hours per device: a window in that device's own time zone (the browser's IANA
  // zone, so daylight saving time needs nothing). Both empty ends them.
  function quietHoursForm(d) {
    const f = document.createElement('form');
    f.className = 'quiet-hours';
    const from = document.createElement('input');
    const to = document.createElement('input');
    from.type = to.type = 'time';
    from.className = 'quiet-from';
    to.className = 'quiet-to';
    from.setAttribute('aria-label', 'Quiet from');
    to.setAttribute('aria-label', 'Quiet until');
    from.value = d.quiet_hours ? d.quiet_hours.from : '';
    to.value = d.quiet_hours ? d.quiet_hours.to : '';
    const save = document.createElement('button');
    save.type = 'submit';
    save.className = 'link quiet-save';
    save.textContent = 'Set';
    const said = document.createElement('span');
    said.className = 'quiet-status';
    if (d.quiet_hours) said.textContent = d.quiet_hours.tz;
    f.append('quiet hours ', from, '–', to, save, said);
    f.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
      try {
        const r = await post('/page/api/push', { op: 'quiet_hours', id: d.id, from: from.value, to: to.value, tz });
        said.classList.remove('error');
        said.textContent = r.quiet_hours ? 'saved (' + r.quiet_hours.tz + ')' : 'none';
      } catch (e) {
        said.classList.add('error');
        said.textContent = e.message;
      }
    });
    return f;
  }

  function setupNotifications() {
    const status = $('#notify-status');
    const say = (m, bad) => { status.textContent = m; status.classList.toggle('error', !!bad); };
    if ('serviceWorker' in navigator) navigator.serviceWorker.register('/sw.js').catch(() => {});
    $('#notify').addEventListener('toggle', () => { if ($('#notify').open) refreshNotifications(); });
    $('#notify-here').addEventListener('click', async () => {
      try {
        if (!('serviceWorker' in navigator) || !('PushManager' in window)) {
          throw new Error('this browser has no Web Push (on iOS: add the page to the Home Screen first)');
        }
        if ((await Notification.requestPermission()) !== 'granted') throw new Error('notifications are blocked for this page');
        const p = await getJson('/page/api/push');
        const reg = await navigator.serviceWorker.ready;
        const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64uToBytes(p.vapid) });
        const name = (navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform || 'a device';
        await post('/page/api/push', { op: 'subscribe', subscription: sub.toJSON(), name });
        say('This device gets notifications while you are away.');
        refreshNotifications();
      } catch (e) {
        say('Not set up: ' + e.message, true);
      }
    });
    $('#ntfy').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await post('/page/api/push', { op: 'ntfy', url: $('#ntfy-url').value.trim(), token: $('#ntfy-token').value, content: $('#ntfy-content').checked });
        $('#ntfy-token').value = '';
        say($('#ntfy-url').value.trim() ? 'ntfy saved.' : 'ntfy turned off.');
        refreshNotifications();
      } catch (e) {
        say('ntfy not saved: ' + e.message, true);
      }
    });
    // A tapped notification opens #attention=ID: bring that prompt forward (also when the
    // page is open already and only its hash changes).
    const fromHash = () => {
      const m = /attention=([^&]+)/.exec(location.hash);
      if (!m) return;
      focusAttention = decodeURIComponent(m[1]);
      if (current) render(current);
    };
    window.addEventListener('hashchange', fromHash);
    fromHash();
  }

  let focusAttention = null;

  async function loop() {
    let first = true;
    for (;;) {
      try {
        const url = first ? '/page/api/state' : '/page/api/state?since=' + version + '&wait=25';
        let r;
        try {
          r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
        } catch (e) {
          // No answer at all (this device is offline, or the receiver is down): the page
          // may be the service worker's stored shell, so say plainly that nothing is live.
          r = null;
        }
        // A proxy in front of a receiver that is down answers 502, 503 or 504.
        if (!r || (r.status >= 502 && r.status <= 504)) {
          setConn('offline', 'offline');
          $('#offline').hidden = false;
          first = true;
          await sleep(2000);
          continue;
        }
        if (r.status === 401) {
          setConn('out', 'logged out');
          location.href = '/login';
          return;
        }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        render(await r.json());
        setConn('live', 'live');
        $('#offline').hidden = true;
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
    // The Away switch: machines wait for answers from here only while it is on.
    $('#away').addEventListener('change', async (ev) => {
      const box = ev.currentTarget;
      box.dataset.busy = '1';
      try {
        const r = await post('/page/api/away', { away: box.checked });
        box.checked = !!r.away;
      } catch (e) {
        box.checked = !box.checked;
      } finally {
        delete box.dataset.busy;
      }
    });
    setupNotifications();
    setupInbox();
    // Relative times age without new data.
    setInterval(() => {
      if (current) for (const s of current.sessions) {
        const card = cards.get(s.key);
        if (card) updateCard(card, s);
      }
    }, 15000);
    if (location.pathname === '/pair') showPairing();
    loop();
  });
})();
