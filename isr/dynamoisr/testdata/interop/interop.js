'use strict';
// interop.js writes and reads the ISR cache table the way a TypeScript
// service following the seed documents does, with the AWS SDK for
// JavaScript (DynamoDBDocumentClient for the items, the low-level client to
// report attribute types). isr's TestNodeInterop drives it step by step.
//
//   node interop.js <step> <table> '<args as JSON>'   one step, one JSON line out
//   node interop.js serve <table>                     one JSON request per stdin line
//                                                     ({"step":..., "args":{...}}), one JSON line out each
//
// Environment: IDEM_DYNAMODB_ENDPOINT (DynamoDB Local). Credentials are
// dummies and the region is us-east-1.
//
// Every reply is {"ok":true,...} or {"ok":false,"error":"<name>","message":...};
// a refused condition is {"ok":false,"error":"ConditionalCheckFailedException"}
// or, for a transaction, "TransactionCanceledException" with "reasons".

const crypto = require('node:crypto');
const readline = require('node:readline');
const { DynamoDBClient, GetItemCommand } = require('@aws-sdk/client-dynamodb');
const {
  DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  UpdateCommand,
  DeleteCommand,
  TransactWriteCommand,
  NumberValue,
} = require('@aws-sdk/lib-dynamodb');

const endpoint = process.env.IDEM_DYNAMODB_ENDPOINT;
if (!endpoint) {
  process.stderr.write('IDEM_DYNAMODB_ENDPOINT is not set\n');
  process.exit(2);
}
const low = new DynamoDBClient({
  endpoint,
  region: 'us-east-1',
  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  maxAttempts: 3,
});
const doc = DynamoDBDocumentClient.from(low, { marshallOptions: { removeUndefinedValues: true } });

// canonicalize is RFC 8785 (JSON Canonicalization Scheme): object keys
// sorted by UTF-16 code units, numbers and strings as ECMAScript's
// JSON.stringify writes them (no HTML escaping), no whitespace.
function canonicalize(v) {
  if (v === null || typeof v !== 'object') {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new Error('JCS: non-finite number');
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return '[' + v.map(canonicalize).join(',') + ']';
  const keys = Object.keys(v).sort(); // default sort compares UTF-16 code units
  return '{' + keys.map((k) => JSON.stringify(k) + ':' + canonicalize(v[k])).join(',') + '}';
}

// requestHash is what isr.RequestHash computes: lowercase hex SHA-256 of the
// canonical JSON array of the inputs.
function requestHash(inputs) {
  return crypto.createHash('sha256').update(canonicalize(inputs), 'utf8').digest('hex');
}

// num turns a JSON argument into a number attribute value: a JSON number as
// JavaScript holds it, a string as that exact N text (NumberValue), so a
// test can write exponent forms and long fractions verbatim.
function num(v) {
  if (typeof v === 'string') return NumberValue.from(v);
  return v;
}

// typed reads an item with the low-level client and reports each attribute
// as {"type": "S"|"N"|..., "value": <text>}.
async function typed(table, pk, sk) {
  const out = await low.send(new GetItemCommand({ TableName: table, Key: { pk: { S: pk }, sk: { S: sk } }, ConsistentRead: true }));
  if (!out.Item) return null;
  const item = {};
  for (const [k, av] of Object.entries(out.Item)) {
    const [type] = Object.keys(av);
    item[k] = { type, value: av[type] };
  }
  return item;
}

const steps = {
  // hash: isr.RequestHash of args.inputs, and the canonical text hashed.
  async hash(table, a) {
    return { hash: requestHash(a.inputs), canonical: canonicalize(a.inputs) };
  },

  // get: one item with its attribute types.
  async get(table, a) {
    return { item: await typed(table, a.pk, a.sk) };
  },

  // getMeta: META as a reader following recipe B would resolve it: when
  // META carries current_sk, the VER# row's s3_key, generated_at and etag
  // win. fresh is the seeds' rule, generated_at + revalidate_seconds > now,
  // in JavaScript numbers.
  async getMeta(table, a) {
    const meta = (await doc.send(new GetCommand({ TableName: table, Key: { pk: a.pk, sk: 'META' }, ConsistentRead: true }))).Item;
    if (!meta) return { found: false };
    let m = { ...meta };
    if (meta.current_sk) {
      const ver = (await doc.send(new GetCommand({ TableName: table, Key: { pk: a.pk, sk: meta.current_sk }, ConsistentRead: true }))).Item;
      if (!ver) throw new Error('current_sk points to a missing row');
      m = { ...m, s3_key: ver.s3_key, generated_at: ver.generated_at, etag: ver.etag };
    }
    return { found: true, meta: m, fresh: Number(m.generated_at) + Number(m.revalidate_seconds) > a.now };
  },

  // putMetaA: recipe A's META put, as the TypeScript model writes it.
  async putMetaA(table, a) {
    const item = { pk: a.pk, sk: 'META', s3_key: a.s3_key, generated_at: num(a.generated_at), revalidate_seconds: num(a.revalidate_seconds), etag: a.etag, ttl: a.ttl === undefined ? undefined : num(a.ttl) };
    await doc.send(new PutCommand({ TableName: table, Item: item }));
    return {};
  },

  // publishB: recipe B's pointer swap: put VER#<id> if absent, then point
  // META at it with only current_sk, version+1 and revalidate_seconds (the
  // pointer-only META: no denormalised s3_key, generated_at, etag).
  async publishB(table, a) {
    const verSK = 'VER#' + a.id;
    await doc.send(new TransactWriteCommand({
      TransactItems: [
        {
          Put: {
            TableName: table,
            Item: { pk: a.pk, sk: verSK, s3_key: a.s3_key, generated_at: num(a.generated_at), etag: a.etag },
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        },
        {
          Update: {
            TableName: table,
            Key: { pk: a.pk, sk: 'META' },
            UpdateExpression: 'SET current_sk = :c, revalidate_seconds = :r, version = if_not_exists(version, :zero) + :one',
            ExpressionAttributeValues: { ':c': verSK, ':r': num(a.revalidate_seconds), ':zero': 0, ':one': 1 },
          },
        },
      ],
    }));
    return { current_sk: verSK };
  },

  // publishPointerOnly: recipe B from scratch, as a TypeScript service
  // that follows the recipe's sketch writes it: put VER#<id> if absent
  // (s3_key, generated_at, etag, and revalidate_seconds only when given),
  // then set META to the pointer alone: current_sk and version+1, no
  // freshness fields at all.
  async publishPointerOnly(table, a) {
    const verSK = 'VER#' + a.id;
    const ver = { pk: a.pk, sk: verSK, s3_key: a.s3_key, generated_at: num(a.generated_at), etag: a.etag };
    if (a.revalidate_seconds !== undefined) ver.revalidate_seconds = num(a.revalidate_seconds);
    await doc.send(new TransactWriteCommand({
      TransactItems: [
        { Put: { TableName: table, Item: ver, ConditionExpression: 'attribute_not_exists(pk)' } },
        {
          Update: {
            TableName: table,
            Key: { pk: a.pk, sk: 'META' },
            UpdateExpression: 'SET current_sk = :c, version = if_not_exists(version, :zero) + :one',
            ExpressionAttributeValues: { ':c': verSK, ':zero': 0, ':one': 1 },
          },
        },
      ],
    }));
    return { current_sk: verSK };
  },

  // acquire: the lease acquire of the schema: put LOCK if absent or
  // lease_expires_at <= now.
  async acquire(table, a) {
    await doc.send(new PutCommand({
      TableName: table,
      Item: { pk: a.pk, sk: 'LOCK', lease_token: a.token, lease_expires_at: num(a.expires_at), ttl: num(a.ttl) },
      ConditionExpression: 'attribute_not_exists(pk) OR lease_expires_at <= :now',
      ExpressionAttributeValues: { ':now': num(a.now) },
    }));
    return {};
  },

  // release: delete LOCK if it carries the token.
  async release(table, a) {
    await doc.send(new DeleteCommand({
      TableName: table,
      Key: { pk: a.pk, sk: 'LOCK' },
      ConditionExpression: 'lease_token = :tok',
      ExpressionAttributeValues: { ':tok': a.token },
    }));
    return {};
  },

  // publishA: recipe A in one transaction: put META, and delete LOCK on
  // the lease's condition (token matches, lease_expires_at > now). The
  // seed's separate ConditionCheck on LOCK is folded into the delete:
  // DynamoDB refuses two operations on one item in a transaction.
  async publishA(table, a) {
    await doc.send(new TransactWriteCommand({
      TransactItems: [
        {
          Put: {
            TableName: table,
            Item: { pk: a.pk, sk: 'META', s3_key: a.s3_key, generated_at: num(a.generated_at), revalidate_seconds: num(a.revalidate_seconds), etag: a.etag },
          },
        },
        {
          Delete: {
            TableName: table,
            Key: { pk: a.pk, sk: 'LOCK' },
            ConditionExpression: '#tok = :tok AND #exp > :now',
            ExpressionAttributeNames: { '#tok': 'lease_token', '#exp': 'lease_expires_at' },
            ExpressionAttributeValues: { ':tok': a.token, ':now': num(a.now) },
          },
        },
      ],
    }));
    return {};
  },

  // beginRequest: the REQ# create of the idempotency seed: put STARTED
  // guarded by attribute_not_exists(pk); on a refusal read the item and
  // fail closed when its request_hash differs.
  async beginRequest(table, a) {
    const hash = a.hash !== undefined ? a.hash : requestHash(a.inputs);
    const sk = 'REQ#' + a.key;
    try {
      await doc.send(new PutCommand({
        TableName: table,
        Item: { pk: a.pk, sk, request_hash: hash, status: 'STARTED', ttl: num(a.ttl) },
        ConditionExpression: 'attribute_not_exists(pk)',
      }));
      return { created: true, hash, status: 'STARTED' };
    } catch (e) {
      if (e.name !== 'ConditionalCheckFailedException') throw e;
    }
    const cur = (await doc.send(new GetCommand({ TableName: table, Key: { pk: a.pk, sk }, ConsistentRead: true }))).Item;
    if (!cur) throw new Error('REQ# vanished');
    if (cur.request_hash !== hash) {
      return { created: false, mismatch: true, hash, stored_hash: cur.request_hash, status: cur.status };
    }
    return { created: false, mismatch: false, hash, status: cur.status, result_s3_key: cur.result_s3_key };
  },

  // completeRequest: STARTED -> COMPLETED with result_s3_key, only with the
  // same request_hash.
  async completeRequest(table, a) {
    await doc.send(new UpdateCommand({
      TableName: table,
      Key: { pk: a.pk, sk: 'REQ#' + a.key },
      UpdateExpression: 'SET #st = :done, result_s3_key = :r',
      ConditionExpression: '#st = :started AND request_hash = :h',
      ExpressionAttributeNames: { '#st': 'status' },
      ExpressionAttributeValues: { ':done': 'COMPLETED', ':started': 'STARTED', ':h': a.hash, ':r': a.result_s3_key },
    }));
    return {};
  },
};

async function run(step, table, args) {
  const f = steps[step];
  if (!f) return { ok: false, error: 'UnknownStep', message: step };
  try {
    return { ok: true, ...(await f(table, args || {})) };
  } catch (e) {
    const out = { ok: false, error: e.name || 'Error', message: String(e.message || e) };
    if (e.CancellationReasons) out.reasons = e.CancellationReasons.map((r) => r.Code);
    return out;
  }
}

async function main() {
  const [step, table, json] = process.argv.slice(2);
  if (!step || !table) {
    process.stderr.write('usage: node interop.js <step> <table> [args-json] | node interop.js serve <table>\n');
    process.exit(2);
  }
  if (step !== 'serve') {
    process.stdout.write(JSON.stringify(await run(step, table, json ? JSON.parse(json) : {})) + '\n');
    return;
  }
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let req;
    try {
      req = JSON.parse(line);
    } catch (e) {
      process.stdout.write(JSON.stringify({ ok: false, error: 'BadRequest', message: String(e.message) }) + '\n');
      continue;
    }
    process.stdout.write(JSON.stringify(await run(req.step, table, req.args)) + '\n');
  }
}

main().catch((e) => {
  process.stderr.write(String((e && e.stack) || e) + '\n');
  process.exit(1);
});
