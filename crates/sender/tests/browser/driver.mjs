// Browser driver for tests/receiver_page.rs: runs Debian's /usr/bin/chromium headless through
// playwright-core (which never downloads a browser) and obeys one JSON command per stdin
// line, answering one JSON line on stdout: {"ok":true,...} or {"ok":false,"error":...}.
// Install what it needs with scripts/test-deps.sh.
//
// Commands ({"op": ..., ...}):
//   launch {width, height, scale, ignore_https_errors?}
//                                        a fresh profile (--user-data-dir in a new temp dir);
//                                        ignore_https_errors for a proxy's own test CA
//   goto {url}                           -> {status}
//   fill {selector, value} | click {selector}
//   wait {selector, state?, timeout?}    state: visible (default), hidden, attached, detached
//   wait_text {selector, text, timeout?} an element matching selector contains text
//   text {selector} -> {text}            attr {selector, name} -> {value}
//   screenshot {path, fullPage?}         cookies -> {cookies}        url -> {url}
//   webauthn                             a CDP virtual authenticator on the page (ctap2,
//                                        internal, resident keys, user verified) -> {authenticator}
//   credentials                          -> {credentials} the virtual authenticator holds
//   grant {origin, permissions}          push {origin, data}     notifications -> {notifications}
//   worker_activated -> {scope}          caches -> {caches}      offline {offline}
//   eval {script} -> {value}
//   sw_eval {script} -> {value}          the script run in the page origin's service worker
//   new_page -> {index}                  another tab of the same profile, made the current one
//   use_page {index}                     makes tab `index` (0 is the first) the current one
//   close
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const CHROMIUM = process.env.SP_CHROMIUM || '/usr/bin/chromium';
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

let context = null;
let page = null;
let profile = null;
let webauthn = null;

async function pageText() {
  try {
    return (await page.evaluate(() => document.body ? document.body.innerText : '')).slice(0, 3000);
  } catch (e) {
    return '(no page text: ' + e.message + ')';
  }
}

async function run(cmd) {
  const timeout = cmd.timeout ?? 20000;
  switch (cmd.op) {
    case 'launch': {
      profile = mkdtempSync(join(tmpdir(), 'sp-chromium-'));
      context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: ARGS,
        viewport: { width: cmd.width ?? 390, height: cmd.height ?? 844 },
        deviceScaleFactor: cmd.scale ?? 2,
        isMobile: true,
        hasTouch: true,
        ignoreHTTPSErrors: !!cmd.ignore_https_errors,
        timeout: 60000,
        // Chromium keeps some files outside its profile (crash reports under
        // $XDG_CONFIG_HOME/chromium, caches): point all of them into the temp profile, so the
        // test never writes into the user's HOME.
        env: {
          ...process.env,
          HOME: profile,
          XDG_CONFIG_HOME: join(profile, '.config'),
          XDG_CACHE_HOME: join(profile, '.cache'),
          XDG_DATA_HOME: join(profile, '.local', 'share'),
        },
      });
      page = context.pages()[0] || await context.newPage();
      page.setDefaultTimeout(20000);
      return { version: context.browser() ? context.browser().version() : null };
    }
    case 'goto': {
      const r = await page.goto(cmd.url, { waitUntil: 'load', timeout });
      return { status: r ? r.status() : null };
    }
    case 'fill':
      await page.locator(cmd.selector).fill(cmd.value, { timeout });
      return {};
    case 'click':
      await page.locator(cmd.selector).click({ timeout });
      return {};
    case 'wait':
      await page.locator(cmd.selector).first().waitFor({ state: cmd.state ?? 'visible', timeout });
      return {};
    case 'wait_text':
      await page.locator(cmd.selector, { hasText: cmd.text }).first().waitFor({ state: 'visible', timeout });
      return {};
    case 'text':
      return { text: await page.locator(cmd.selector).first().innerText({ timeout }) };
    case 'count':
      return { count: await page.locator(cmd.selector).count() };
    case 'attr':
      return { value: await page.locator(cmd.selector).first().getAttribute(cmd.name, { timeout }) };
    case 'screenshot':
      await page.screenshot({ path: cmd.path, fullPage: !!cmd.fullPage });
      return {};
    case 'webauthn': {
      const cdp = await context.newCDPSession(page);
      await cdp.send('WebAuthn.enable', { enableUI: false });
      const r = await cdp.send('WebAuthn.addVirtualAuthenticator', { options: {
        protocol: 'ctap2', transport: 'internal', hasResidentKey: true,
        hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true,
      } });
      webauthn = { cdp, id: r.authenticatorId };
      return { authenticator: r.authenticatorId };
    }
    case 'credentials': {
      const r = await webauthn.cdp.send('WebAuthn.getCredentials', { authenticatorId: webauthn.id });
      return { credentials: r.credentials };
    }
    case 'grant':
      // What a person grants when the page asks (notifications for push). Granted before
      // a push, not with it: a worker that wakes for a push reads the permission it had.
      await context.grantPermissions(cmd.permissions, { origin: cmd.origin });
      return {};
    case 'push': {
      // A push delivered to the page's service worker the way the push service would
      // (CDP ServiceWorker.deliverPushMessage), without a push service.
      const cdp = await context.newCDPSession(page);
      const regs = [];
      cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => regs.push(...e.registrations));
      await cdp.send('ServiceWorker.enable');
      const until = Date.now() + timeout;
      while (!regs.some((r) => r.scopeURL.startsWith(cmd.origin) && !r.isDeleted)) {
        if (Date.now() > until) throw new Error('no service worker registered for ' + cmd.origin);
        await new Promise((r) => setTimeout(r, 50));
      }
      const reg = regs.find((r) => r.scopeURL.startsWith(cmd.origin) && !r.isDeleted);
      // A registration can exist while its worker is still installing; a subscription (so
      // a push) needs an activated one. Wait for it.
      await page.evaluate(async (ms) => {
        const r = await navigator.serviceWorker.ready;
        const w = r.active;
        if (w.state === 'activated') return;
        await new Promise((ok, no) => {
          const t = setTimeout(() => no(new Error('service worker stuck in ' + w.state)), ms);
          w.addEventListener('statechange', () => { if (w.state === 'activated') { clearTimeout(t); ok(); } });
        });
      }, Math.max(0, until - Date.now()));
      await cdp.send('ServiceWorker.deliverPushMessage', { origin: cmd.origin, registrationId: reg.registrationId, data: cmd.data });
      return { registration: reg.registrationId, scope: reg.scopeURL };
    }
    case 'worker_activated':
      // Waits until the page's service worker is activated (its install, shell cache
      // included, is over) and controls the page -> {scope}.
      return { scope: await page.evaluate(async (ms) => {
        const until = Date.now() + ms;
        const r = await navigator.serviceWorker.ready;
        while (r.active.state !== 'activated' || !navigator.serviceWorker.controller) {
          if (Date.now() > until) throw new Error('service worker stuck in ' + r.active.state + (navigator.serviceWorker.controller ? '' : ', not controlling the page'));
          await new Promise((ok) => setTimeout(ok, 50));
        }
        return r.scope;
      }, timeout) };
    case 'caches':
      // What the page's origin keeps in Cache Storage -> {caches: {name: [path, ...]}}.
      return { caches: await page.evaluate(async () => {
        const out = {};
        for (const name of await caches.keys()) {
          const c = await caches.open(name);
          out[name] = (await c.keys()).map((r) => { const u = new URL(r.url); return u.pathname + u.search; }).sort();
        }
        return out;
      }) };
    case 'offline':
      // This device loses (or gets back) its network, as Chromium emulates it.
      await context.setOffline(!!cmd.offline);
      return {};
    case 'notifications':
      // What the service worker shows (its registration's notifications), as the page sees them.
      return { notifications: await page.evaluate(async () => {
        const reg = await navigator.serviceWorker.ready;
        return (await reg.getNotifications()).map((n) => ({ title: n.title, body: n.body, tag: n.tag, data: n.data, actions: (n.actions || []).map((a) => a.action) }));
      }) };
    case 'eval':
      return { value: await page.evaluate(cmd.script) };
    case 'sw_eval': {
      // Playwright's Worker.evaluate in the service worker of the current page's origin.
      const origin = new URL(page.url()).origin;
      const until = Date.now() + timeout;
      let sw = null;
      while (!(sw = context.serviceWorkers().find((w) => w.url().startsWith(origin)))) {
        if (Date.now() > until) throw new Error('no service worker for ' + origin);
        await new Promise((r) => setTimeout(r, 50));
      }
      return { value: await sw.evaluate(cmd.script) };
    }
    case 'new_page':
      page = await context.newPage();
      page.setDefaultTimeout(20000);
      return { index: context.pages().indexOf(page) };
    case 'use_page':
      page = context.pages()[cmd.index];
      if (!page) throw new Error('no tab ' + cmd.index);
      return {};
    case 'cookies':
      return { cookies: await context.cookies() };
    case 'url':
      return { url: page.url() };
    case 'close':
      await close();
      return {};
    default:
      throw new Error('unknown op ' + cmd.op);
  }
}

async function close() {
  if (context) {
    const c = context;
    context = null;
    await c.close().catch(() => {});
  }
  if (profile) {
    rmSync(profile, { recursive: true, force: true });
    profile = null;
  }
}

const rl = createInterface({ input: process.stdin });
const queue = [];
let busy = false;
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) {
    const line = queue.shift();
    let reply;
    try {
      const cmd = JSON.parse(line);
      reply = { ok: true, ...(await run(cmd)) };
    } catch (e) {
      reply = { ok: false, error: String(e && e.message || e), page: page ? await pageText() : null };
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
  }
  busy = false;
}
rl.on('line', (line) => { if (line.trim()) { queue.push(line); pump(); } });
rl.on('close', async () => {
  while (busy || queue.length) await new Promise((r) => setTimeout(r, 20));
  await close();
  process.exit(0);
});
