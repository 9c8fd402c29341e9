#!/usr/bin/env node
// A Stop hook written in Node.js that does the same SQLite look-up as `sp-stop --harness
// claude-code` with nothing queued, for the comparison in `cargo bench --bench hooks`
// (BENCHMARKS.md): read the hook JSON on stdin, read the config, open control.db with the same
// pragmas, check the schema version, then ask whether the session is fresh and whether any
// prompt is queued or attention open. It prints nothing, as sp-stop does when nothing is queued.
'use strict';
const fs = require('fs');
const path = require('path');
const Database = require('better-sqlite3');

const TOUCH_EVERY_MS = 60000;

function stateDir() {
  if (process.env.SESSIONPIPE_STATE_DIR) return process.env.SESSIONPIPE_STATE_DIR;
  const base = process.env.XDG_STATE_HOME || path.join(process.env.HOME || '/', '.local', 'state');
  return path.join(base, 'sessionpipe');
}

function configFile() {
  if (process.env.SESSIONPIPE_CONFIG) return process.env.SESSIONPIPE_CONFIG;
  const base = process.env.XDG_CONFIG_HOME || path.join(process.env.HOME || '/', '.config');
  return path.join(base, 'sessionpipe', 'config.json');
}

function main() {
  const input = JSON.parse(fs.readFileSync(0, 'utf8'));
  if (typeof input.session_id !== 'string' || input.hook_event_name !== 'Stop') return;
  const cfgPath = configFile();
  let config = {};
  try {
    config = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
    if ((fs.statSync(cfgPath).mode & 0o077) !== 0) throw new Error('config readable by others');
  } catch (e) {
    if (e.code !== 'ENOENT') throw e;
  }
  void config;
  const db = new Database(path.join(stateDir(), 'control.db'), { fileMustExist: true, timeout: 3000 });
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('user_version', { simple: true });
  const key = 'claude-code:' + input.session_id;
  const now = Date.now();
  const row = db
    .prepare(
      "SELECT (SELECT ended_at IS NULL AND ?2 - last_event_ms < ?3 FROM sessions WHERE key=?1) AS fresh, " +
        "EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='prompt' AND state='queued') " +
        "OR EXISTS(SELECT 1 FROM attention WHERE session_key=?1 AND state='open') AS work"
    )
    .get(key, now, TOUCH_EVERY_MS);
  if (row.fresh === 1 && row.work === 0) {
    db.close();
    return;
  }
  // Stale session: keep it live, as sp-stop does (the benchmark queues nothing).
  const at = new Date(now).toISOString();
  db.prepare('UPDATE sessions SET last_event_at=?2, last_event_ms=?3, ended_at=NULL WHERE key=?1').run(key, at, now);
  db.close();
}

try {
  main();
} catch (e) {
  // Like sp-stop: never break the host; a failure prints nothing on stdout.
  process.stderr.write(`hook.js: ${e && e.message}\n`);
}
