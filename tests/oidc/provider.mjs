// A real OpenID provider on loopback for Portcullis' OAUTHBEARER tests: the npm package
// oidc-provider (a certified OpenID Connect implementation), plus a small admin API for the tests.
// Started by scripts/lib/oidc.sh (oidc_start), which passes the ports and exports the OIDC_* URLs.
//
// Provider (http://127.0.0.1:$OIDC_PORT, the issuer):
//   /.well-known/openid-configuration  discovery
//   /token                             client credentials (client_secret_basic or _post), and the
//                                      JWT-bearer grant (RFC 7523, KIP-1139; below)
//   /token/introspection               RFC 7662 (opaque tokens only: oidc-provider refuses JWTs there)
//   /jwks                              the public key set (any query string, e.g. /jwks?node=a, is
//                                      counted apart, so each Portcullis can have its own count)
//   /kafka/jwks                        the same key set, counted apart: Kafka's own listener uses it
// Access tokens are JWTs (RS256 by default; ES256 for the es256 client) with iss, aud ("kafka"),
// sub (the client id: oidc-provider's choice for client credentials), iat, exp, jti, client_id and
// a `groups` claim (per client), or opaque tokens for the opaque client. Keys are generated at start.
//
// JWT-bearer grant (RFC 7523 §2.1, what Kafka's KIP-1139 JwtBearerJwtRetriever and Portcullis'
// oauth-jwt-bearer login module send): POST /token with
// grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer and assertion=<JWT>, optionally scope and
// resource, and no client authentication (RFC 7523 §3: the assertion is the proof; its `iss` names
// the client). oidc-provider finds the client before any grant handler runs and refuses a request
// that names none, so a /token request without an Authorization header, whose grant is this one
// and whose form has no client_id, gets client_id=<the assertion's iss> added before oidc-provider
// reads it (through req.body: oidc-provider warns once that the body was already read). The one
// client of this grant (OIDC_JWT_BEARER_CLIENT_ID, default jwt-bearer-client; token endpoint auth
// `none`) has an RSA key pair made at start, whose private key the admin API hands out. The
// assertion must be RS256, signed by that key (a `kid` header, if any, must be its kid), with
// iss = the client id, sub = one of the client's subjects (the main client's id: the principal
// Kafka's OAUTH listener makes a super user), aud = the token endpoint URL or the issuer, exp in
// the future and at most 3600 s away, nbf and iat not in the future (5 s leeway), and a jti that
// was not used before (if it has one). Anything else is refused with invalid_grant (HTTP 400;
// error_description says why: signature, expired, claim iss/sub/aud/nbf/iat, lifetime, kid,
// replay, malformed, alg), counted by reason. Accepted: an access token as for client credentials
// (JWT for the resource kafka, signed by the provider's current RS256 key, groups ["testers"]), whose
// sub is the assertion's sub.
//
// Admin API (http://127.0.0.1:$OIDC_ADMIN_PORT, OIDC_ADMIN_URL), JSON in and out:
//   GET  /health          {"ok": true}
//   GET  /clients         the client-credentials clients: [{client_id, client_secret, groups, alg, format}]
//   GET  /tokens-issued   {client_id: JWT access tokens issued to it, by client credentials or the
//                          JWT-bearer grant}; ?grant=client_credentials or
//                          ?grant=urn:ietf:params:oauth:grant-type:jwt-bearer: by that grant only
//   GET  /jwt-bearer-client  the JWT-bearer client: {client_id, private_key_pem (PKCS#8), alg, kid,
//                          subjects, audiences (accepted `aud` values), token_endpoint,
//                          refused: {reason: count}, refusals: [{reason, assertion}] (the last 20
//                          refused assertions, so a test can check that nobody printed them)}
//   GET  /keys            the published keys: [{kid, alg, kty, current}] (public facts only)
//   GET  /jwks-requests   {"total", "ok", "unavailable", "by_url": {url: {ok, unavailable, agents}},
//                          "by_user_agent": {agent: count}}: every request to a JWKS path, by its
//                          path and query as sent (Portcullis says User-Agent: portcullis/<version>)
//   POST /rotate          {"alg": "RS256"|"ES256"} (default RS256): a new key, published and made the
//                         one that signs that alg from now on; the old keys stay published.
//                         Answers {"kid", "alg"}
//   POST /reset           back to the keys made at start, JWKS up again. Answers {"kids"}
//   POST /down, /up       while down, every JWKS path answers 503 (counted as "unavailable")
//   POST /mint            signs an arbitrary JWT, for the refusal tests. Body (all optional):
//                           "claims": merged over {iss, aud, sub: "minted-user", iat: now,
//                                     exp: now + OIDC_TOKEN_TTL_SECONDS, jti}; a null value drops a claim
//                           "header": merged over {alg, kid, typ: "JWT"}; null drops a field
//                           "key":    "RS256" (default) | "ES256" | a kid: which published key signs
//                           "forge":  "alg-none"          header alg none, empty signature
//                                     "hs256-public-key"  HS256 with the signing key's public PEM as
//                                                         the HMAC secret (the algorithm-confusion attack)
//                                     "bad-signature"     a real signature with one bit flipped
//                                     "tampered-payload"  a real signature over other claims: the payload
//                                                         is replaced by `tampered_claims` after signing
//                                     "unknown-key"       signed by a fresh key that is never published
//                         Answers {"token", "header", "claims"}
//
// Environment: OIDC_PORT, OIDC_ADMIN_PORT (required); OIDC_TOKEN_TTL_SECONDS (12), OIDC_AUDIENCE
// (kafka), OIDC_CLIENT_ID / OIDC_CLIENT_SECRET (the main client), OIDC_JWT_BEARER_CLIENT_ID.
// Test-only secrets and keys, loopback only.

import * as crypto from 'node:crypto';
import * as http from 'node:http';

import * as jose from 'jose';
import Provider, { errors } from 'oidc-provider';

const PORT = Number(process.env.OIDC_PORT);
const ADMIN_PORT = Number(process.env.OIDC_ADMIN_PORT);
if (!PORT || !ADMIN_PORT) {
  throw new Error('OIDC_PORT and OIDC_ADMIN_PORT are required');
}
const ISSUER = `http://127.0.0.1:${PORT}`;
const TTL = Number(process.env.OIDC_TOKEN_TTL_SECONDS || 12);
const AUDIENCE = process.env.OIDC_AUDIENCE || 'kafka';
// The one resource server (RFC 8707): tokens for it are JWTs with aud = AUDIENCE. Clients that send
// no `resource` parameter (Kafka's, librdkafka's) get it by default.
const RESOURCE = 'urn:portcullis:kafka';
// Scopes a client may ask for (`scope` parameter); a token carries those it asked for, or none.
const SCOPES = 'kafka:read kafka:write';

// The client-credentials clients. `groups` goes into the token's groups claim; `alg` signs its JWTs;
// format "opaque" gives opaque tokens (for the introspection validator).
const CLIENTS = [
  {
    client_id: process.env.OIDC_CLIENT_ID || 'portcullis-test-client',
    client_secret: process.env.OIDC_CLIENT_SECRET || 'portcullis-test-client-secret',
    groups: ['testers'], alg: 'RS256', format: 'jwt',
  },
  { client_id: 'reader-client', client_secret: 'reader-client-secret', groups: ['readers'], alg: 'RS256', format: 'jwt' },
  { client_id: 'es256-client', client_secret: 'es256-client-secret', groups: ['testers'], alg: 'ES256', format: 'jwt' },
  { client_id: 'opaque-client', client_secret: 'opaque-client-secret', groups: ['readers'], alg: 'RS256', format: 'opaque' },
  // For a resource server (Portcullis) to authenticate at the introspection endpoint.
  { client_id: 'introspector', client_secret: 'introspector-secret', groups: [], alg: 'RS256', format: 'jwt' },
];
const clientById = new Map(CLIENTS.map((c) => [c.client_id, c]));

// The JWT-bearer grant's client (header comment). Its key pair is made at start (below).
const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const TOKEN_URL = `${ISSUER}/token`;
const JWT_BEARER = {
  client_id: process.env.OIDC_JWT_BEARER_CLIENT_ID || 'jwt-bearer-client',
  subjects: [CLIENTS[0].client_id],
  audiences: [TOKEN_URL, ISSUER],
  groups: ['testers'], alg: 'RS256', format: 'jwt',
  kid: undefined, publicKey: undefined, privateKeyPem: undefined,
};
const MAX_ASSERTION_LIFETIME_S = 3600;
const ASSERTION_LEEWAY_S = 5;

// The settings of a client's tokens: a client-credentials client or the JWT-bearer client.
function tokenClient(clientId) {
  return clientById.get(clientId) ?? (clientId === JWT_BEARER.client_id ? JWT_BEARER : undefined);
}

// ---- keys -----------------------------------------------------------------------------------------

// Every published key, newest first: oidc-provider signs with the first key of the wanted alg.
const keys = [];
let keySerial = 0;

async function newKey(alg) {
  keySerial += 1;
  const { privateKey, publicKey } = await jose.generateKeyPair(alg, { extractable: true });
  const kid = `${alg.toLowerCase()}-${keySerial}-${crypto.randomBytes(4).toString('hex')}`;
  const jwk = { ...(await jose.exportJWK(privateKey)), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, publicKey, jwk };
}

function currentKey(alg) {
  return keys.find((k) => k.alg === alg);
}

// ---- the provider --------------------------------------------------------------------------------

// oidc-provider reads its key set once, at construction: a rotation builds a new instance with the
// new set. Its default (in-memory) token store is shared by every instance of the process, so
// opaque tokens issued before a rotation still introspect after it.
function buildProvider() {
  const provider = new Provider(ISSUER, {
    clients: [
      ...CLIENTS.map((c) => ({
        client_id: c.client_id,
        client_secret: c.client_secret,
        grant_types: ['client_credentials'],
        scope: SCOPES,
        redirect_uris: [],
        response_types: [],
      })),
      {
        client_id: JWT_BEARER.client_id,
        token_endpoint_auth_method: 'none', // the assertion is the proof (RFC 7523 §3)
        grant_types: [JWT_BEARER_GRANT],
        scope: SCOPES,
        redirect_uris: [],
        response_types: [],
      },
    ],
    jwks: { keys: keys.map((k) => k.jwk) },
    scopes: ['openid', ...SCOPES.split(' ')],
    features: {
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: async (_ctx, _client, oneOf) => oneOf ?? RESOURCE,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, indicator, client) => resourceServerInfo(indicator, client.clientId),
      },
    },
    // sub is the client id for client credentials in the JWT format already; opaque tokens'
    // introspection answers carry no sub unless it is an extra claim, so it is one for every token.
    // A JWT-bearer token's sub is its assertion's.
    extraTokenClaims: async (_ctx, token) => {
      const c = tokenClient(token.clientId);
      return c ? { sub: assertionSubjects.get(token) ?? c.client_id, groups: c.groups } : undefined;
    },
    // oidc-provider puts the client id in a client-credentials JWT's sub, after the extra claims.
    formats: {
      customizers: {
        jwt: async (_ctx, token, jwt) => {
          const sub = assertionSubjects.get(token);
          if (sub !== undefined) jwt.payload.sub = sub;
        },
      },
    },
    ttl: { ClientCredentials: TTL, AccessToken: TTL },
    // oidc-provider wants cookie keys even though no flow here uses cookies.
    cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  });
  provider.registerGrantType(JWT_BEARER_GRANT, jwtBearerGrant, ['assertion', 'scope', 'resource']);
  provider.on('server_error', (_ctx, err) => console.error('server_error', err));
  // Both grants' tokens are ClientCredentials tokens (JWTs are "issued", not stored).
  provider.on('client_credentials.issued', (token) => {
    const grant = assertionSubjects.has(token) ? JWT_BEARER_GRANT : 'client_credentials';
    const counts = (tokensIssued[grant] ??= {});
    counts[token.clientId] = (counts[token.clientId] || 0) + 1;
  });
  provider.on('grant.error', (_ctx, err) => console.error('grant.error', err.message, err.error_description ?? ''));
  return provider;
}

function resourceServerInfo(indicator, clientId) {
  if (indicator !== RESOURCE) {
    throw new errors.InvalidTarget();
  }
  const c = tokenClient(clientId);
  return {
    scope: SCOPES,
    audience: AUDIENCE,
    accessTokenTTL: TTL,
    accessTokenFormat: c.format,
    ...(c.format === 'jwt' ? { jwt: { sign: { alg: c.alg } } } : {}),
  };
}

let handler; // the current provider's request handler
const tokensIssued = {}; // grant -> client id -> JWT access tokens issued

// ---- the JWT-bearer grant (RFC 7523) ------------------------------------------------------------------

const assertionSubjects = new WeakMap(); // JWT-bearer token -> the sub of its assertion
const usedJtis = new Map(); // jti of an accepted assertion -> its exp (forgotten after that)
const jwtBearerRefused = {}; // reason -> count
const jwtBearerRefusals = []; // the last 20: {reason, assertion}

function refuseAssertion(reason, assertion) {
  jwtBearerRefused[reason] = (jwtBearerRefused[reason] || 0) + 1;
  jwtBearerRefusals.push({ reason, assertion });
  if (jwtBearerRefusals.length > 20) jwtBearerRefusals.shift();
  const err = new errors.InvalidGrant();
  err.error_description = `assertion refused: ${reason}`;
  return err;
}

// Why jose refused an assertion, as a short reason.
function joseReason(e) {
  switch (e?.code) {
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED': return 'signature';
    case 'ERR_JWT_EXPIRED': return 'expired';
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED': return `claim ${e.claim}`;
    case 'ERR_JOSE_ALG_NOT_ALLOWED': return 'alg';
    default: return 'malformed';
  }
}

async function jwtBearerGrant(ctx) {
  const { client, params } = ctx.oidc;
  const { InvalidRequest, InvalidScope, InvalidTarget } = errors;
  // Only the JWT-bearer client has the grant (oidc-provider checked the client's grant_types).
  const c = JWT_BEARER;
  const { assertion } = params;
  if (!assertion) throw new InvalidRequest("missing required parameter 'assertion'");
  let header;
  try {
    header = jose.decodeProtectedHeader(assertion);
  } catch {
    throw refuseAssertion('malformed', assertion);
  }
  if (header.kid !== undefined && header.kid !== c.kid) throw refuseAssertion('kid', assertion);
  let payload;
  try {
    ({ payload } = await jose.jwtVerify(assertion, c.publicKey, {
      algorithms: [c.alg],
      issuer: client.clientId,
      audience: c.audiences,
      requiredClaims: ['iss', 'sub', 'aud', 'exp'],
      clockTolerance: ASSERTION_LEEWAY_S,
    }));
  } catch (e) {
    throw refuseAssertion(joseReason(e), assertion);
  }
  const now = Math.floor(Date.now() / 1000);
  if (!c.subjects.includes(payload.sub)) throw refuseAssertion('claim sub', assertion);
  if (payload.exp - now > MAX_ASSERTION_LIFETIME_S) throw refuseAssertion('lifetime', assertion);
  if (payload.iat !== undefined && payload.iat > now + ASSERTION_LEEWAY_S) throw refuseAssertion('claim iat', assertion);
  for (const [jti, exp] of usedJtis) if (exp + ASSERTION_LEEWAY_S < now) usedJtis.delete(jti);
  if (payload.jti !== undefined) {
    if (typeof payload.jti !== 'string' || usedJtis.has(payload.jti)) throw refuseAssertion('replay', assertion);
    usedJtis.set(payload.jti, payload.exp);
  }

  if (params.resource !== undefined && params.resource !== RESOURCE) throw new InvalidTarget();
  const scopes = params.scope ? params.scope.split(' ').filter(Boolean) : [];
  const allowed = new Set(SCOPES.split(' '));
  if (scopes.some((s) => !allowed.has(s))) throw new InvalidScope('requested scope is not allowed', params.scope);

  // As oidc-provider's own client-credentials handler does (lib/actions/grants/client_credentials.js).
  const { ClientCredentials, ResourceServer } = ctx.oidc.provider;
  const token = new ClientCredentials({ client, scope: scopes.join(' ') || undefined });
  assertionSubjects.set(token, payload.sub);
  token.resourceServer = new ResourceServer(RESOURCE, resourceServerInfo(RESOURCE, client.clientId));
  ctx.oidc.entity('ClientCredentials', token);
  const value = await token.save();
  ctx.body = {
    access_token: value,
    expires_in: token.expiration,
    token_type: token.tokenType,
    ...(token.scope ? { scope: token.scope } : {}),
  };
}

// RFC 7523 §3 assertion-only requests name no client: add client_id=<the assertion's iss> (unverified
// here; the handler verifies the assertion with that client's key). Answers true when it already
// answered the request itself.
const FORM_LIMIT = 56 * 1024; // oidc-provider's own limit
async function nameAssertionClient(req, res) {
  if (req.method !== 'POST' || req.headers.authorization !== undefined
      || !(req.headers['content-type'] ?? '').startsWith('application/x-www-form-urlencoded')) {
    return false;
  }
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > FORM_LIMIT) {
      res.writeHead(413, { 'content-type': 'application/json' });
      res.end('{"error":"invalid_request","error_description":"request entity too large"}');
      return true;
    }
    chunks.push(chunk);
  }
  const body = Buffer.concat(chunks);
  req.body = body; // oidc-provider reads a request whose stream was consumed from req.body
  const form = new URLSearchParams(body.toString('utf8'));
  if (form.get('grant_type') !== JWT_BEARER_GRANT || form.has('client_id') || form.has('client_assertion')) {
    return false;
  }
  let iss;
  try {
    ({ iss } = jose.decodeJwt(form.get('assertion') ?? ''));
  } catch {
    return false; // no client then: oidc-provider refuses the request
  }
  if (typeof iss === 'string' && iss) {
    form.set('client_id', iss);
    req.body = Buffer.from(form.toString());
  }
  return false;
}

function rebuild() {
  handler = buildProvider().callback();
}

// ---- JWKS accounting and the down switch -------------------------------------------------------------

const jwksRequests = { total: 0, ok: 0, unavailable: 0, by_url: {}, by_user_agent: {} };
let jwksDown = false;

function isJwksPath(pathname) {
  return pathname === '/jwks' || pathname === '/kafka/jwks';
}

function countJwks(req, outcome) {
  jwksRequests.total += 1;
  jwksRequests[outcome] += 1;
  const agent = req.headers['user-agent'] || '(none)';
  const u = (jwksRequests.by_url[req.url] ??= { ok: 0, unavailable: 0, agents: {} });
  u[outcome] += 1;
  u.agents[agent] = (u.agents[agent] || 0) + 1;
  jwksRequests.by_user_agent[agent] = (jwksRequests.by_user_agent[agent] || 0) + 1;
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, ISSUER);
  if (url.pathname === '/token') {
    try {
      if (await nameAssertionClient(req, res)) return;
    } catch (e) {
      console.error('reading a token request failed', String(e?.message ?? e));
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":"invalid_request"}');
      return;
    }
  }
  if (isJwksPath(url.pathname)) {
    if (jwksDown) {
      countJwks(req, 'unavailable');
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":"temporarily_unavailable"}');
      return;
    }
    countJwks(req, 'ok');
    req.url = '/jwks'; // the alias serves the provider's own endpoint
  }
  handler(req, res);
});

// ---- /mint ------------------------------------------------------------------------------------------

const b64 = (obj) => Buffer.from(JSON.stringify(obj)).toString('base64url');

function merged(base, overrides) {
  const out = { ...base };
  for (const [k, v] of Object.entries(overrides ?? {})) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

async function mint(body) {
  const keyName = body.key ?? 'RS256';
  let key = keys.find((k) => k.kid === keyName) ?? currentKey(keyName);
  if (!key) throw new Error(`no published key ${keyName}`);
  if (body.forge === 'unknown-key') key = await newKey(key.alg); // never added to `keys`
  const now = Math.floor(Date.now() / 1000);
  const claims = merged({
    iss: ISSUER, aud: AUDIENCE, sub: 'minted-user', iat: now, exp: now + TTL, jti: crypto.randomUUID(),
  }, body.claims);
  let header = merged({ alg: key.alg, kid: key.kid, typ: 'JWT' }, body.header);
  if (body.forge === 'alg-none') header = { ...header, alg: 'none' };
  if (body.forge === 'hs256-public-key') header = { ...header, alg: 'HS256' };
  const signingInput = `${b64(header)}.${b64(claims)}`;
  let token;
  switch (body.forge ?? null) {
    case 'alg-none':
      token = `${signingInput}.`;
      break;
    case 'hs256-public-key': {
      // What a verifier that takes the key from the JWKS and the algorithm from the token would check.
      const pem = crypto.createPublicKey({ key: key.jwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
      token = `${signingInput}.${crypto.createHmac('sha256', pem).update(signingInput).digest('base64url')}`;
      break;
    }
    case null:
    case 'unknown-key':
    case 'bad-signature':
    case 'tampered-payload': {
      const signed = await new jose.CompactSign(Buffer.from(JSON.stringify(claims)))
        .setProtectedHeader(header).sign(key.privateKey);
      const [h, p, s] = signed.split('.');
      if (body.forge === 'bad-signature') {
        const sig = Buffer.from(s, 'base64url');
        sig[sig.length >> 1] ^= 0x01;
        token = `${h}.${p}.${sig.toString('base64url')}`;
      } else if (body.forge === 'tampered-payload') {
        const other = merged(claims, body.tampered_claims ?? { sub: 'admin' });
        token = `${h}.${b64(other)}.${s}`;
      } else {
        token = signed;
      }
      break;
    }
    default:
      throw new Error(`unknown forge ${body.forge}`);
  }
  return { token, header, claims };
}

// ---- the admin API -------------------------------------------------------------------------------

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const text = Buffer.concat(chunks).toString();
  return text ? JSON.parse(text) : {};
}

const routes = {
  'GET /health': async () => ({ ok: true }),
  'GET /clients': async () => CLIENTS,
  'GET /keys': async () => keys.map((k) => ({
    kid: k.kid, alg: k.alg, kty: k.jwk.kty, current: currentKey(k.alg) === k,
  })),
  'GET /jwks-requests': async () => jwksRequests,
  'GET /tokens-issued': async (_body, url) => {
    const grant = url.searchParams.get('grant');
    if (grant !== null) return tokensIssued[grant] ?? {};
    const all = {};
    for (const counts of Object.values(tokensIssued)) {
      for (const [client, n] of Object.entries(counts)) all[client] = (all[client] || 0) + n;
    }
    return all;
  },
  'GET /jwt-bearer-client': async () => ({
    client_id: JWT_BEARER.client_id,
    private_key_pem: JWT_BEARER.privateKeyPem,
    alg: JWT_BEARER.alg,
    kid: JWT_BEARER.kid,
    subjects: JWT_BEARER.subjects,
    audiences: JWT_BEARER.audiences,
    token_endpoint: TOKEN_URL,
    refused: jwtBearerRefused,
    refusals: jwtBearerRefusals,
  }),
  'POST /rotate': async (body) => {
    const key = await newKey(body.alg ?? 'RS256');
    keys.unshift(key);
    rebuild();
    console.log(`rotated: ${key.kid} now signs ${key.alg}`);
    return { kid: key.kid, alg: key.alg };
  },
  'POST /reset': async () => {
    // Back to the keys made at start (tests that rotate call it when done, so that validators
    // which cached the start keys, like Kafka's listener, see only keys they know).
    keys.splice(0, keys.length, ...startKeys);
    jwksDown = false;
    rebuild();
    return { kids: keys.map((k) => k.kid) };
  },
  'POST /down': async () => { jwksDown = true; return { down: true }; },
  'POST /up': async () => { jwksDown = false; return { down: false }; },
  'POST /mint': mint,
};

const admin = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://admin');
  const route = routes[`${req.method} ${url.pathname}`];
  if (!route) {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":"no such route"}');
    return;
  }
  try {
    const out = await route(await readJson(req), url);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(out));
  } catch (e) {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: String(e?.message ?? e) }));
  }
});

// ---- start ----------------------------------------------------------------------------------------

keys.push(await newKey('RS256'), await newKey('ES256'));
const startKeys = [...keys];
{
  const { privateKey, publicKey } = await jose.generateKeyPair(JWT_BEARER.alg, { extractable: true });
  JWT_BEARER.kid = `jwt-bearer-${crypto.randomBytes(4).toString('hex')}`;
  JWT_BEARER.publicKey = publicKey;
  JWT_BEARER.privateKeyPem = await jose.exportPKCS8(privateKey);
}
rebuild();
server.listen(PORT, '127.0.0.1');
admin.listen(ADMIN_PORT, '127.0.0.1');
console.log(`oidc-provider ${ISSUER} (admin http://127.0.0.1:${ADMIN_PORT}), token lifetime ${TTL}s, keys ${keys.map((k) => k.kid).join(', ')}, JWT-bearer client ${JWT_BEARER.client_id} (kid ${JWT_BEARER.kid})`);
process.on('SIGTERM', () => process.exit(0));
