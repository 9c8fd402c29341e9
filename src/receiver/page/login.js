// A link from `sp-receiver --login-url` carries the login token in its fragment (never sent
// to the server in the URL): take it out of the address bar and log in with it.
'use strict';
document.addEventListener('DOMContentLoaded', () => {
  const m = /^#login=(.+)$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, '', location.pathname);
  const form = document.getElementById('login-form');
  document.getElementById('token').value = decodeURIComponent(m[1]);
  form.submit();
});
