// sessionpipe's service worker: keeps the page's shell for when the receiver cannot be
// reached, shows what sp-receiver pushes (push.rs), withdraws a prompt's notification when
// the prompt is over, and opens the prompt on the page when a notification is tapped.
// Deny on a prompt's notification is answered here only with signed control: a command
// signed with the page's own current day key, posted where the page posts it
// (answerFromNotification below). Allow opens the prompt on the page, which asks for the
// passkey's touch over that exact allow (DECISIONS 36: a worker cannot touch, and the machine
// refuses an allow on the day key alone). Without a current day grant, without signed
// control, or on any failure Deny opens the prompt on the page too: never an unsigned answer.
'use strict';

// The receiver puts a hash of the shell's files here (page.rs), so a receiver with other
// files is a new worker with a new cache, and the old cache goes at activation.
const CACHE = 'sessionpipe-shell-%SHELL_VERSION%';
const CACHE_PREFIX = 'sessionpipe-shell-';
// The shell: static files with nothing of the person's in them. The state, the CSRF
// secret, every answer and everything under /page/api/ or /api/ only ever come from the
// network; nothing posted is ever stored.
const SHELL = [
  '/', '/login', '/assets/app.css', '/assets/app.js', '/assets/login.js',
  '/assets/icon.svg', '/assets/icon-192.png', '/assets/icon-512.png',
  '/assets/icon-maskable-512.png', '/assets/apple-touch-icon.png', '/manifest.webmanifest',
];

self.addEventListener('install', (ev) => {
  ev.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await Promise.all(SHELL.map(async (path) => {
      try {
        const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
        // `/` answers the login form (401) when logged out: only the page itself is kept.
        if (r.ok && !r.redirected) await cache.put(path, r);
      } catch (e) { /* kept from its next load instead */ }
    }));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (ev) => ev.waitUntil((async () => {
  for (const name of await caches.keys()) {
    if (name.startsWith(CACHE_PREFIX) && name !== CACHE) await caches.delete(name);
  }
  await self.clients.claim();
})()));

// Which stored file answers a request, or null for the network alone.
function shellKey(req, url) {
  if (req.method !== 'GET' || url.origin !== self.location.origin) return null;
  if (req.mode === 'navigate') {
    if (url.pathname === '/' || url.pathname === '/pair') return '/';
    return url.pathname === '/login' ? '/login' : null;
  }
  return !url.search && SHELL.includes(url.pathname) && url.pathname !== '/' ? url.pathname : null;
}

// Network first, so a reachable receiver always answers with what it has now; the stored
// shell only when it cannot be reached (or its proxy says so: 502, 503, 504).
self.addEventListener('fetch', (ev) => {
  const url = new URL(ev.request.url);
  const key = shellKey(ev.request, url);
  if (!key) return;
  ev.respondWith((async () => {
    const stored = () => caches.open(CACHE).then((c) => c.match(key));
    let r;
    try {
      r = await fetch(ev.request);
    } catch (e) {
      const s = await stored();
      if (s) return s;
      throw e;
    }
    if (r.status >= 502 && r.status <= 504) return (await stored()) || r;
    if (r.ok && !r.redirected) {
      const copy = r.clone();
      ev.waitUntil(caches.open(CACHE).then((c) => c.put(key, copy)).catch(() => {}));
    }
    return r;
  })());
});

self.addEventListener('push', (ev) => {
  let p = {};
  try { p = ev.data ? ev.data.json() : {}; } catch (e) { p = {}; }
  ev.waitUntil((async () => {
    if (p.clear) {
      const open = await self.registration.getNotifications({ tag: p.clear });
      for (const n of open) n.close();
      return;
    }
    await self.registration.showNotification(p.title || 'sessionpipe', {
      body: p.body || '',
      tag: p.tag || undefined,
      renotify: true,
      requireInteraction: !!(p.tag && p.tag.startsWith('attention:')),
      data: { url: p.url || '/', answer: p.answer || null },
      actions: Array.isArray(p.actions) ? p.actions.slice(0, 2) : [],
    });
  })());
});

self.addEventListener('notificationclick', (ev) => {
  ev.notification.close();
  const data = ev.notification.data || {};
  const action = ev.action;
  ev.waitUntil((async () => {
    if (action && await answerFromNotification(data, action).catch(() => false)) return;
    await openPrompt(data, action);
  })());
});

// Opens the page at the prompt; an action only says which button it should bring forward.
// Always on this worker's own origin (the link's path and hash kept): the page the person
// is logged in to, whatever address the receiver names itself by.
async function openPrompt(data, action) {
  let link;
  try { link = new URL(data.url || '/', self.location.origin); } catch (e) { link = new URL('/', self.location.origin); }
  const base = self.location.origin + link.pathname + link.hash;
  const url = action ? base + (link.hash ? '&' : '#') + 'do=' + encodeURIComponent(action) : base;
  const wins = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  for (const w of wins) {
    if (new URL(w.url).origin === self.location.origin && 'navigate' in w) {
      await w.navigate(url).catch(() => {});
      return w.focus().catch(() => {});
    }
  }
  return self.clients.openWindow(url);
}

// ---- Answering from the notification (issue 26) -------------------------------------
// The page keeps its day key in IndexedDB ('sessionpipe', store 'kv', key 'day.' + rp): a
// non-extractable P-256 key and the grant a passkey made for it (app.js dayKey). A push
// for a prompt carries `answer` {session, attention_id, machine, rp} when the receiver has
// signed control and knows the session's machine. The command is built and signed exactly
// as app.js sendSigned builds and signs it, and posted to the same /page/api/signed with
// the login's CSRF value (read from /page/api/state, as the page reads it).

// A grant this close to its end is not used: the machine checks it when the command arrives.
const GRANT_MARGIN_MS = 60 * 1000;

const enc = new TextEncoder();
function b64u(buf) {
  const b = buf instanceof Uint8Array ? buf : new Uint8Array(buf);
  let s = '';
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function dayRecord(rp) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open('sessionpipe', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('kv');
    r.onerror = () => reject(r.error);
    r.onsuccess = () => {
      const q = r.result.transaction('kv').objectStore('kv').get('day.' + rp);
      q.onsuccess = () => resolve(q.result || null);
      q.onerror = () => reject(q.error);
    };
  });
}

// The page's day key for rp if its grant is current (both the expiry the page kept and the
// one the passkey signed), else null.
async function currentDay(rp) {
  const day = await dayRecord(rp);
  if (!day || !day.priv || !day.grant || typeof day.grant.str !== 'string') return null;
  let signed = {};
  try { signed = JSON.parse(day.grant.str); } catch (e) { return null; }
  const until = Date.now() + GRANT_MARGIN_MS;
  if (!(day.exp > until) || !(signed.exp > until) || signed.rp !== rp) return null;
  return day;
}

const isText = (v, max) => typeof v === 'string' && v.length > 0 && v.length <= max;

// Signs and sends Deny for the notification's prompt; whether it was taken. Allow is never
// answered here (DECISIONS 36): it opens the page, where the person touches the passkey.
async function answerFromNotification(data, action) {
  const a = data.answer;
  if (action !== 'deny') return false;
  if (!a || !isText(a.session, 300) || !isText(a.attention_id, 128) || !isText(a.machine, 128) || !isText(a.rp, 253)) return false;
  const day = await currentDay(a.rp);
  if (!day) return false;
  const c = { v: 1, t: 'sessionpipe.control', machine: a.machine, kind: 'permission.answer', session: a.session };
  c.for = a.attention_id;
  c.decision = action;
  c.nonce = b64u(crypto.getRandomValues(new Uint8Array(16)));
  c.iat = Date.now();
  const cmd = JSON.stringify(c);
  const sig = await crypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, day.priv, enc.encode(cmd));
  const st = await fetch('/page/api/state', { credentials: 'same-origin', cache: 'no-store' });
  if (!st.ok) return false;
  const { csrf } = await st.json();
  if (!csrf) return false;
  const r = await fetch('/page/api/signed', {
    method: 'POST',
    credentials: 'same-origin',
    cache: 'no-store',
    headers: { 'content-type': 'application/json', 'x-sessionpipe-csrf': csrf },
    body: JSON.stringify({ cmd, csig: b64u(sig), grant: day.grant }),
  });
  return r.ok;
}
