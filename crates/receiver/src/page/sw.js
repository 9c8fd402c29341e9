// sessionpipe's service worker: shows what sp-receiver pushes (push.rs), withdraws a
// prompt's notification when the prompt is over, and opens the prompt on the page when a
// notification is tapped. It never answers a prompt itself: Allow and Deny open the page,
// where the answer is made (and signed, with signed control).
'use strict';

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (ev) => ev.waitUntil(self.clients.claim()));

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
