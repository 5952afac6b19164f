// The Python SDK's wire types, written from the OpenAPI document (scripts/wire-types.mjs calls
// this). Every titled schema in the document (a component, or one inside a request or a
// response: the TypeBox schemas of packages/protocol carry the titles) becomes a Python type of
// that name: an object a frozen dataclass with snake_case fields (shellbase/_wire.py's from_wire
// fills it from the camelCase JSON), or a TypedDict with the wire's keys for the few objects the
// SDK passes around as dicts; an enum or a union of literals a Literal alias; another union a
// Union alias. The tables below say what the Python SDK adds to that: names for a few responses
// the routes describe inline, classes split in two, behaviour from shellbase/_methods.py, and
// optional fields that read as a value rather than None.

/** Responses the routes describe inline (untitled): the Python class each becomes, by method, path and status. */
export const PY_RESPONSES = {
  CreatedTenant: ['post', '/v1/tenants', '201'],
  CreatedKey: ['post', '/v1/tenants/{tenant}/keys', '201'],
  Usage: ['get', '/v1/usage', '200'],
  ExposedPort: ['post', '/v1/machines/{id}/ports', '200'],
};

/** Titled schemas with no Python class: the error response (shellbase/errors.py reads error bodies into exceptions). */
const SKIP = new Set(['Error']);

/** Titled objects that stay dicts (TypedDicts, the wire's keys): egress policies, defaults and configs, which callers also pass in. */
const TYPED_DICTS = new Set(['NoEgress', 'AllowEgress', 'PublicEgress', 'ContextDefaults', 'ContextConfig', 'ImageConfig']);

/** Results split in two classes: `base` has every field but `fields`, and the exit event of a stream is a `base` too. */
const SPLITS = {
  ExecResult: { base: 'ExecExit', fields: ['stdout', 'stderr'], doc: 'How a query ended: everything of its result but the output.' },
  MachineExecResult: { base: 'MachineExit', fields: ['stdout', 'stderr'], doc: 'How a machine exec ended: everything of its result but the output.' },
};

/** The hand-written class (shellbase/_methods.py) each of these derives from, for its methods and properties. */
const METHODS = { LimitHit: 'LimitHitMethods', ExecExit: 'ExecExitMethods', MachineExit: 'MachineExitMethods' };

/** Optional fields (`Title.wireName`) that read as this Python value when the server leaves them out. */
const DEFAULTS = { 'ExecResult.retries': '0', 'ExecResult.diskLimitHit': 'False' };

const KEYWORDS = new Set(['False', 'None', 'True', 'and', 'as', 'assert', 'async', 'await', 'break', 'class', 'continue', 'def', 'del', 'elif',
  'else', 'except', 'finally', 'for', 'from', 'global', 'if', 'import', 'in', 'is', 'lambda', 'nonlocal', 'not', 'or', 'pass', 'raise',
  'return', 'try', 'while', 'with', 'yield']);

/** `exitCode` -> `exit_code`, as shellbase/_wire.py's snake(); its camel() must give the wire name back. */
const snake = (name) => name.replace(/(?<=[a-z0-9])([A-Z])/g, '_$1').toLowerCase();
const camel = (name) => name.split('_').map((part, i) => (i === 0 ? part : part.slice(0, 1).toUpperCase() + part.slice(1))).join('');

const isSchema = (node) => 'type' in node || 'anyOf' in node || 'oneOf' in node || 'enum' in node || 'const' in node;
const same = (a, b) => JSON.stringify({ ...a, $id: undefined }) === JSON.stringify({ ...b, $id: undefined });

/** The document's titled schemas and the named responses, by name. */
function namedSchemas(doc) {
  const named = new Map();
  const add = (name, schema) => {
    const seen = named.get(name);
    if (seen && !same(seen, schema)) throw new Error(`two different schemas are named ${name} in the OpenAPI document`);
    if (!seen) named.set(name, schema);
  };
  const visit = (node) => {
    if (Array.isArray(node)) { node.forEach(visit); return; }
    if (!node || typeof node !== 'object') return;
    if (typeof node.title === 'string' && isSchema(node)) add(node.title, node);
    Object.values(node).forEach(visit);
  };
  visit(doc.components ?? {});
  visit(doc.paths ?? {});
  for (const [name, [method, path, status]] of Object.entries(PY_RESPONSES)) {
    const schema = doc.paths?.[path]?.[method]?.responses?.[status]?.content?.['application/json']?.schema;
    if (!schema) throw new Error(`${name}: the OpenAPI document has no JSON response ${status} for ${method.toUpperCase()} ${path}`);
    add(name, schema);
  }
  return named;
}

/** What a schema's values are in Python: its members (a union's, flattened), each a type expression. */
function members(schema, named, top = false) {
  if (!top && typeof schema.title === 'string' && named.has(schema.title)) return withNull(schema, [schema.title]);
  const union = schema.anyOf ?? schema.oneOf;
  if (union) return withNull(schema, mergeLiterals(union.flatMap((s) => members(s, named))));
  if ('const' in schema) return withNull(schema, [`Literal[${JSON.stringify(schema.const)}]`]);
  if (schema.enum) {
    // The document writes a null type as {"type": "object", "nullable": true, "enum": [null]} (OpenAPI 3.0).
    const values = schema.enum.filter((v) => v !== null);
    const types = values.length ? [`Literal[${values.map((v) => JSON.stringify(v)).join(', ')}]`] : [];
    return withNull(schema, values.length < schema.enum.length ? [...types, 'None'] : types);
  }
  const type = {
    string: 'str', integer: 'int', number: 'float', boolean: 'bool', null: 'None',
    array: () => `list[${annotation(schema.items ?? {}, named)}]`,
    object: () => (schema.properties || typeof schema.additionalProperties !== 'object' || !isSchema(schema.additionalProperties)
      ? 'dict[str, object]' : `dict[str, ${annotation(schema.additionalProperties, named)}]`),
  }[schema.type];
  if (type === undefined) return ['object'];
  return withNull(schema, [typeof type === 'function' ? type() : type]);
}

const withNull = (schema, types) => (schema.nullable === true && !types.includes('None') ? [...types, 'None'] : types);

/** `Literal["a"]`, `Literal["b"]` -> `Literal["a", "b"]` (the literals first, in order; other members after). */
function mergeLiterals(types) {
  const literals = types.filter((t) => t.startsWith('Literal[')).map((t) => t.slice('Literal['.length, -1));
  const rest = [...new Set(types.filter((t) => !t.startsWith('Literal[')))];
  return literals.length ? [`Literal[${literals.join(', ')}]`, ...rest] : rest;
}

/** A field's annotation (under `from __future__ import annotations`): members joined with `|`, None last. */
function annotation(schema, named) {
  const types = members(schema, named);
  return [...types.filter((t) => t !== 'None'), ...types.filter((t) => t === 'None')].join(' | ');
}

/** A docstring (or `#:` comment) of a description, wrapped. */
function wrap(text, width, prefix) {
  const lines = [];
  let line = '';
  for (const word of text.replace(/\\/g, '\\\\').replace(/"""/g, '\\"\\"\\"').split(/\s+/)) {
    if (line && (prefix + line + ' ' + word).length > width) { lines.push(line); line = word; } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

function docstring(text) {
  if (!text) return [];
  const lines = wrap(text, 110, '    ');
  return lines.length === 1 ? [`    """${lines[0]}"""`, ''] : [`    """${lines[0]}`, ...lines.slice(1).map((l) => `    ${l}`), '    """', ''];
}

function fieldLines(name, schema, named, only) {
  const required = new Set(schema.required ?? []);
  const out = [];
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    if (only && !only(key)) continue;
    const field = snake(key);
    if (camel(field) !== key) throw new Error(`${name}.${key}: its snake_case name ${field} does not turn back into ${key}`);
    if (KEYWORDS.has(field)) throw new Error(`${name}.${key}: ${field} is a Python keyword`);
    const type = annotation(prop, named);
    const given = DEFAULTS[`${name}.${key}`];
    if (given !== undefined) out.push(`    ${field}: ${type} = ${given}`);
    else if (required.has(key)) out.push(`    ${field}: ${type}`);
    else out.push(`    ${field}: ${type.split(' | ').includes('None') ? type : `${type} | None`} = None`);
  }
  return out;
}

function dataclass(name, bases, doc, fields) {
  return ['@dataclass(frozen=True, kw_only=True)', `class ${name}${bases.length ? `(${bases.join(', ')})` : ''}:`,
    ...docstring(doc), ...(fields.length ? fields : ['    pass']), '', ''];
}

function objectClass(name, schema, named) {
  const split = SPLITS[name];
  if (!split) return dataclass(name, METHODS[name] ? [METHODS[name]] : [], schema.description, fieldLines(name, schema, named));
  const rest = new Set(split.fields);
  for (const f of rest) if (!schema.properties?.[f]) throw new Error(`${name} has no field ${f} to split off`);
  return [
    ...dataclass(split.base, METHODS[split.base] ? [METHODS[split.base]] : [], split.doc, fieldLines(name, schema, named, (k) => !rest.has(k))),
    ...dataclass(name, [split.base], schema.description, fieldLines(name, schema, named, (k) => rest.has(k))),
  ];
}

function typedDict(name, schema, named) {
  const keys = Object.entries(schema.properties ?? {});
  const required = new Set(schema.required ?? []);
  const line = ([key, prop]) => {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || KEYWORDS.has(key)) throw new Error(`${name}.${key}: not a Python identifier`);
    return `    ${key}: ${annotation(prop, named)}`;
  };
  const must = keys.filter(([k]) => required.has(k));
  const may = keys.filter(([k]) => !required.has(k));
  const doc = docstring(schema.description);
  // Required and optional keys in one TypedDict: the required ones in a base (NotRequired under
  // `from __future__ import annotations` is not seen at run time by Python 3.11).
  if (must.length && may.length) {
    return [`class _${name}Keys(TypedDict):`, ...must.map(line), '', '',
      `class ${name}(_${name}Keys, total=False):`, ...doc, ...may.map(line), '', ''];
  }
  return [`class ${name}(TypedDict${must.length ? '' : ', total=False'}):`, ...doc, ...(keys.length ? keys.map(line) : ['    pass']), '', ''];
}

function alias(name, schema, named) {
  const types = members(schema, named, true);
  const comment = schema.description ? wrap(schema.description, 118, '#: ').map((l) => `#: ${l}`) : [];
  return [...comment, `${name} = ${types.length === 1 ? types[0] : `Union[${types.join(', ')}]`}`, ''];
}

/**
 * The Python module of the document's wire types. `header` opens it (it says it is generated,
 * and by what); the rest depends on the document alone, in a fixed order.
 */
export function pythonWireTypes(doc, header) {
  const named = namedSchemas(doc);
  for (const n of SKIP) named.delete(n);
  const names = [...named.keys()].sort();
  const isObject = (s) => s.type === 'object' && !s.anyOf && !s.oneOf;
  const literals = names.filter((n) => !isObject(named.get(n)) && members(named.get(n), named, true).every((t) => t.startsWith('Literal[')));
  const unions = names.filter((n) => !isObject(named.get(n)) && !literals.includes(n));
  const dicts = names.filter((n) => isObject(named.get(n)) && TYPED_DICTS.has(n));
  const classes = names.filter((n) => isObject(named.get(n)) && !TYPED_DICTS.has(n));
  for (const n of [...Object.keys(SPLITS), ...Object.keys(METHODS), ...TYPED_DICTS, ...Object.keys(DEFAULTS).map((k) => k.split('.')[0])]) {
    if (!named.has(n) && !Object.values(SPLITS).some((s) => s.base === n)) throw new Error(`the OpenAPI document has no schema named ${n} (scripts/openapi-python.mjs names it)`);
  }
  const methods = [...new Set(classes.flatMap((n) => [n, SPLITS[n]?.base]).filter((n) => n && METHODS[n]).map((n) => METHODS[n]))].sort();
  const body = [
    ...literals.flatMap((n) => alias(n, named.get(n), named)), '',
    ...dicts.flatMap((n) => typedDict(n, named.get(n), named)),
    // Unions after the classes they may name; annotations are strings, so classes may name them first.
    ...classes.flatMap((n) => objectClass(n, named.get(n), named)),
    ...unions.flatMap((n) => alias(n, named.get(n), named)),
  ];
  const text = [
    header.trimEnd(), '',
    'from __future__ import annotations', '',
    'from dataclasses import dataclass',
    'from typing import Literal, TypedDict, Union', '',
    ...(methods.length ? [`from ._methods import ${methods.join(', ')}`, ''] : []), '',
    ...body,
  ].join('\n');
  return `${text.replace(/\n{3,}/g, '\n\n\n').trimEnd()}\n`;
}
