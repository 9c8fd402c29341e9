// sessionpipe's service worker: keeps the page's shell for when the receiver cannot be
// reached, shows what sp-receiver pushes (push.rs), withdraws a prompt's notification when
// the prompt is over, and opens the prompt on the page when a notification is tapped. It
// never answers a prompt itself: Allow and Deny open the page, where the answer is made
// (and signed, with signed control).
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
      data: { url: p.url || '/' },
      actions: Array.isArray(p.actions) ? p.actions.slice(0, 2) : [],
    });
  })());
});

self.addEventListener('notificationclick', (ev) => {
  ev.notification.close();
  const base = (ev.notification.data && ev.notification.data.url) || '/';
  // The action only says which button the page should bring forward; the page answers.
  const url = ev.action ? base + '&do=' + encodeURIComponent(ev.action) : base;
  ev.waitUntil((async () => {
    const wins = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    for (const w of wins) {
      if (new URL(w.url).origin === self.location.origin && 'navigate' in w) {
        await w.navigate(url).catch(() => {});
        return w.focus();
      }
    }
    return self.clients.openWindow(url);
  })());
});
