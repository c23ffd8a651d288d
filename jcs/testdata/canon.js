// Reads JSON texts, one per line, from stdin and writes each one's RFC 8785
// form, one per line: JSON.stringify with object members sorted by UTF-16
// code units (the RFC's own reference algorithm in JavaScript).
'use strict';
function canon(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return '[' + v.map(canon).join(',') + ']';
  return '{' + Object.keys(v).sort().map(k => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';
}
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', d => { input += d; });
process.stdin.on('end', () => {
  const out = [];
  for (const line of input.split('\n')) {
    if (line === '') continue;
    out.push(canon(JSON.parse(line)));
  }
  process.stdout.write(out.join('\n') + '\n');
});
