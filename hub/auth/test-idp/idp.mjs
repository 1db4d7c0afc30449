// A university's OpenID Connect provider, in small, for the hub's login test (tests/test_hub_reach.py).
//
//   node hub/auth/test-idp/idp.mjs SETTINGS.json
//
// node-oidc-provider 9.13.3 (the certified Node implementation; hub/auth/test-idp/package.json, installed
// by `make hub-idp` with npm ci) over TLS, with what a university's IdP has and the package leaves to its
// user: accounts with passwords, a sign-in page that checks them, no consent page for the university's own
// registered application (the hub), and the standard claims. Everything comes from SETTINGS.json (root,
// 0600: it holds the client secret and the passwords; nothing secret on the command line, where `ps` shows
// it to every user):
//
//   {"issuer": "https://10.0.0.1:9443", "host": "10.0.0.1", "port": 9443,
//    "tls": {"cert": "/path/cert.pem", "key": "/path/key.pem"},
//    "clients": [{"client_id": "...", "client_secret": "...", "redirect_uris": ["https://hub/hub/oauth_callback"]}],
//    "accounts": [{"login": "jdoe", "password": "...", "sub": "opaque-id",
//                  "claims": {"preferred_username": "jdoe", "name": "Jane Doe", "email": "jdoe@uni.example"}}]}
//
// Prints one line "idp listening on ISSUER" when ready. Every sign-in is logged (login, accepted or not).

import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { generateKeyPairSync, timingSafeEqual, createHash, randomBytes } from 'node:crypto';

import Provider, { errors } from 'oidc-provider';

const settings = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const byLogin = new Map(settings.accounts.map((a) => [a.login, a]));
const bySub = new Map(settings.accounts.map((a) => [a.sub, a]));

const escape = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
  .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
// Compare digests, so neither the length nor the content of a stored password leaks through timing.
const samePassword = (given, stored) => timingSafeEqual(
  createHash('sha256').update(String(given)).digest(), createHash('sha256').update(String(stored)).digest(),
);

const signingKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });

const provider = new Provider(settings.issuer, {
  clients: settings.clients.map((c) => ({
    grant_types: ['authorization_code'], response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic', ...c,
  })),
  jwks: { keys: [{ ...signingKey, use: 'sig', alg: 'RS256', kid: 'tc-test-idp' }] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'], profile: ['name', 'preferred_username'], email: ['email', 'email_verified'],
  },
  scopes: ['openid', 'profile', 'email'],
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const account = bySub.get(sub);
    if (!account) return undefined;
    return { accountId: sub, claims: async () => ({ sub, email_verified: true, ...account.claims }) };
  },
  // The hub is the university's own registered application: no consent page (as a university's IdP
  // is set up for its own services). The grant covers the scopes asked for.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(ctx.oidc.requestParamScopes ? [...ctx.oidc.requestParamScopes].join(' ') : 'openid');
    await grant.save();
    return grant;
  },
});

function page(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${escape(title)}</title></head>
<body><h1>University sign-in</h1>${body}</body></html>`;
}

function loginForm(uid, message = '', login = '') {
  return page('Sign in', `${message ? `<p id="error" role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
  <label>University login <input id="login" name="login" autocomplete="username" value="${escape(login)}" required></label>
  <label>Password <input id="password" name="password" type="password" autocomplete="current-password" required></label>
  <button id="sign-in" type="submit">Sign in</button>
</form>
<p><a id="cancel" href="/interaction/${escape(uid)}/abort">Cancel</a></p>`);
}

async function formBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16384) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// The sign-in page: /interaction/:uid (GET), /interaction/:uid/login (POST), /interaction/:uid/abort.
provider.use(async (ctx, next) => {
  const match = /^\/interaction\/([\w-]+)(\/login|\/abort)?$/.exec(ctx.path);
  if (!match) return next();
  ctx.set('cache-control', 'no-store');
  const [, uid, action] = match;
  try {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (details.uid !== uid) ctx.throw(400, 'interaction mismatch');
    if (!action && ctx.method === 'GET') {
      ctx.type = 'html';
      ctx.body = loginForm(uid);
      return undefined;
    }
    if (action === '/abort' && ctx.method === 'GET') {
      ctx.respond = false;
      return provider.interactionFinished(ctx.req, ctx.res,
        { error: 'access_denied', error_description: 'sign-in cancelled' }, { mergeWithLastSubmission: false });
    }
    if (action === '/login' && ctx.method === 'POST') {
      const form = await formBody(ctx.req);
      const account = byLogin.get(form.get('login') || '');
      const ok = Boolean(account) && samePassword(form.get('password') || '', account.password);
      console.log(`idp sign-in ${JSON.stringify(form.get('login'))}: ${ok ? 'accepted' : 'refused'}`);
      if (!ok) {
        ctx.status = 401;
        ctx.type = 'html';
        ctx.body = loginForm(uid, 'Wrong login or password.', form.get('login') || '');
        return undefined;
      }
      ctx.respond = false;
      return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: account.sub } },
        { mergeWithLastSubmission: false });
    }
    ctx.throw(405);
  } catch (err) {
    if (err instanceof errors.SessionNotFound) {
      ctx.status = 400;
      ctx.type = 'html';
      ctx.body = page('Sign in', '<p id="error">This sign-in has expired: start again from the hub.</p>');
      return undefined;
    }
    throw err;
  }
  return undefined;
});

const server = createServer({
  cert: readFileSync(settings.tls.cert), key: readFileSync(settings.tls.key),
}, provider.callback());
server.listen(settings.port, settings.host, () => console.log(`idp listening on ${settings.issuer}`));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
