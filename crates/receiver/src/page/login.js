// A link from `sp-receiver --login-url` carries the login token in its fragment (never sent
// to the server in the URL): take it out of the address bar and log in with it.
'use strict';
//
// Opened at a pairing link (/pair?code=…) while logged out: go back there after logging in.
document.addEventListener('DOMContentLoaded', () => {
  if (location.pathname === '/pair') document.getElementById('next').value = location.pathname + location.search;
  const m = /^#login=(.+)$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, '', location.pathname + location.search);
  const form = document.getElementById('login-form');
  document.getElementById('token').value = decodeURIComponent(m[1]);
  form.submit();
});
