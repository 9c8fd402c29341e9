// Renders the page's PNG icons from crates/receiver/src/page/icon.svg with the test suite's
// chromium (playwright-core from crates/sender/tests/browser; install with scripts/test-deps.sh):
//   node scripts/icons.mjs
// The PNGs are committed (sp-receiver embeds them); run this again after changing icon.svg.
//   icon-192.png, icon-512.png   the icon as drawn (rounded corners), manifest purpose "any"
//   icon-maskable-512.png        full bleed (no rounded corners, the launcher masks it);
//                                the glyph already sits inside the 80% safe zone
//   apple-touch-icon.png 180     full bleed too: iOS rounds the corners itself and shows
//                                transparent corners as black
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'crates/sender/tests/browser/package.json'));
const { chromium } = require('playwright-core');
const dir = join(root, 'crates/receiver/src/page');
const svg = readFileSync(join(dir, 'icon.svg'), 'utf8');
const fullBleed = svg.replace(/ rx="\d+"/, '');
if (fullBleed === svg) throw new Error('icon.svg has no rounded background to square off');

const out = [
  ['icon-192.png', 192, svg],
  ['icon-512.png', 512, svg],
  ['icon-maskable-512.png', 512, fullBleed],
  ['apple-touch-icon.png', 180, fullBleed],
];
const browser = await chromium.launch({
  executablePath: process.env.SP_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--force-color-profile=srgb'],
});
try {
  for (const [name, size, src] of out) {
    const page = await browser.newPage({ viewport: { width: size, height: size }, deviceScaleFactor: 1 });
    const url = 'data:image/svg+xml;base64,' + Buffer.from(src).toString('base64');
    await page.setContent(`<style>html,body{margin:0;background:transparent}img{display:block}</style><img src="${url}" width="${size}" height="${size}">`);
    await page.locator('img').evaluate((i) => i.decode());
    writeFileSync(join(dir, name), await page.screenshot({ omitBackground: true, type: 'png' }));
    await page.close();
    console.log(name, size);
  }
} finally {
  await browser.close();
}
