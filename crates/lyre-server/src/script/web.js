// The web-standard globals applications use, which QuickJS does not have:
// URLSearchParams, URL, Headers, Request, Response, fetch, TextEncoder,
// TextDecoder, crypto (randomUUID, getRandomValues, subtle.digest), timers,
// structuredClone, atob and btoa; and Node's Buffer and setImmediate. Evaluated once per runtime, before prelude.js, as
// a function given Lyre's native functions (script/native.rs).
(function (native) {
	'use strict';

	/** The bytes of a BufferSource (or a string, as UTF-8). */
	function bytesOf(data) {
		if (data instanceof Uint8Array) return data;
		if (data instanceof ArrayBuffer) return new Uint8Array(data);
		if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
		if (typeof data === 'string') return native.utf8Encode(data);
		throw new TypeError('expected an ArrayBuffer, a typed array or a string');
	}

	class TextEncoder {
		get encoding() {
			return 'utf-8';
		}
		encode(text = '') {
			return native.utf8Encode(String(text));
		}
	}

	class TextDecoder {
		#fatal;
		constructor(label = 'utf-8', options = {}) {
			if (!/^(utf-?8|unicode-1-1-utf-8)$/i.test(String(label).trim())) {
				throw new RangeError(`The encoding '${label}' is not supported (only UTF-8 is)`);
			}
			this.#fatal = Boolean(options.fatal);
		}
		get encoding() {
			return 'utf-8';
		}
		get fatal() {
			return this.#fatal;
		}
		decode(data) {
			return data === undefined ? '' : native.utf8Decode(bytesOf(data), this.#fatal);
		}
	}

	// ---- URLSearchParams and URL ----
	const decodeComponent = (text) => {
		try {
			return decodeURIComponent(text.replace(/\+/g, ' '));
		} catch {
			return text;
		}
	};
	const encodeComponent = (text) =>
		encodeURIComponent(text)
			.replace(/%20/g, '+')
			.replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

	/** `text`'s `[name, value]` pairs (a leading `?` ignored). */
	function parseSearch(text) {
		const pairs = [];
		for (const part of (text.startsWith('?') ? text.slice(1) : text).split('&')) {
			if (!part) continue;
			const at = part.indexOf('=');
			pairs.push(at < 0 ? [decodeComponent(part), ''] : [decodeComponent(part.slice(0, at)), decodeComponent(part.slice(at + 1))]);
		}
		return pairs;
	}

	/** Parameters a URL hears every change of (`url.searchParams`): its callback. */
	const linkedParams = new WeakMap();

	/**
	 * What a URLSearchParams was made with: the text its `[name, value]` pairs are
	 * parsed from when first used (every request's target is one of these, and most
	 * never read their query), or the pairs. A symbol rather than a private field, so
	 * the prelude can make a request's target as one object literal
	 * (`__lyre_search_pairs` hands it over once): in QuickJS half the cost of running
	 * the constructors. Never written after that: the pairs in use live in `lists`,
	 * so a frozen target still parses and changes them, as an internal slot would.
	 */
	const PAIRS = Symbol('URLSearchParams.pairs');
	Object.defineProperty(globalThis, '__lyre_search_pairs', { value: PAIRS, configurable: true });

	/** Each URLSearchParams's pairs once read or changed (or a URL's new text, until read). */
	const lists = new WeakMap();

	/** The parameters' pairs, parsed (or copied from what they were made with) when first used. */
	function listOf(params) {
		const kept = lists.get(params);
		if (Array.isArray(kept)) return kept;
		const from = kept ?? params[PAIRS] ?? '';
		const list = typeof from === 'string' ? parseSearch(from) : from.map(([name, value]) => [name, value]);
		lists.set(params, list);
		return list;
	}

	/** What a URLSearchParams is made with from its constructor's argument: text, or pairs. */
	function madeWith(init) {
		if (init === undefined || init === null) return '';
		if (typeof init === 'string') return init;
		if (init instanceof URLSearchParams) return [...init];
		if (typeof init[Symbol.iterator] === 'function') {
			const pairs = [];
			for (const pair of init) {
				const [name, value] = [...pair];
				pairs.push([String(name), String(value)]);
			}
			return pairs;
		}
		return Object.keys(init).map((name) => [name, String(init[name])]);
	}

	/** Tells the URL linked to these parameters, if any, of a change. */
	function touched(params) {
		linkedParams.get(params)?.(params.toString());
	}

	class URLSearchParams {
		constructor(init) {
			this[PAIRS] = madeWith(init);
		}
		/** Links these parameters to a URL, which hears of every change (`url.searchParams`). */
		static link(params, text, changed) {
			lists.set(params, text);
			linkedParams.set(params, changed);
		}
		get size() {
			return listOf(this).length;
		}
		append(name, value) {
			listOf(this).push([String(name), String(value)]);
			touched(this);
		}
		delete(name, value) {
			lists.set(this, listOf(this).filter(([n, v]) => n !== name || (value !== undefined && v !== String(value))));
			touched(this);
		}
		get(name) {
			const found = listOf(this).find(([n]) => n === name);
			return found ? found[1] : null;
		}
		getAll(name) {
			return listOf(this).filter(([n]) => n === name).map(([, v]) => v);
		}
		has(name, value) {
			return listOf(this).some(([n, v]) => n === name && (value === undefined || v === String(value)));
		}
		set(name, value) {
			const list = listOf(this);
			const at = list.findIndex(([n]) => n === name);
			if (at < 0) return this.append(name, value);
			list[at] = [String(name), String(value)];
			lists.set(this, list.filter(([n], i) => n !== name || i === at));
			touched(this);
		}
		sort() {
			listOf(this).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
			touched(this);
		}
		forEach(callback, thisArg) {
			for (const [name, value] of listOf(this)) callback.call(thisArg, value, name, this);
		}
		*entries() {
			for (const [name, value] of listOf(this)) yield [name, value];
		}
		*keys() {
			for (const [name] of listOf(this)) yield name;
		}
		*values() {
			for (const [, value] of listOf(this)) yield value;
		}
		[Symbol.iterator]() {
			return this.entries();
		}
		toString() {
			return listOf(this).map(([n, v]) => `${encodeComponent(n)}=${encodeComponent(v)}`).join('&');
		}
	}

	/** The WHATWG URL, parsed by Lyre (the `url` crate). */
	class URL {
		#parts;
		#params = new URLSearchParams();
		constructor(input, base) {
			this.#set(base === undefined ? native.parseUrl(String(input)) : native.parseUrl(String(input), String(base)));
		}
		#set(parts) {
			this.#parts = parts;
			URLSearchParams.link(this.#params, parts.search, (search) => {
				this.#parts = native.parseUrl(this.#with({ search: search ? `?${search}` : '' }));
			});
		}
		#with(change) {
			const p = { ...this.#parts, ...change };
			const credentials = p.username ? `${p.username}${p.password ? `:${p.password}` : ''}@` : '';
			const authority = p.host || p.username ? `//${credentials}${p.host}` : p.protocol === 'file:' ? '//' : '';
			return `${p.protocol}${authority}${p.pathname}${p.search}${p.hash}`;
		}
		static canParse(input, base) {
			try {
				new URL(input, base);
				return true;
			} catch {
				return false;
			}
		}
		get href() {
			return this.#parts.href;
		}
		set href(value) {
			this.#set(native.parseUrl(String(value)));
		}
		get origin() {
			return this.#parts.origin;
		}
		get protocol() {
			return this.#parts.protocol;
		}
		get username() {
			return this.#parts.username;
		}
		get password() {
			return this.#parts.password;
		}
		get host() {
			return this.#parts.host;
		}
		get hostname() {
			return this.#parts.hostname;
		}
		get port() {
			return this.#parts.port;
		}
		get pathname() {
			return this.#parts.pathname;
		}
		set pathname(value) {
			this.#set(native.parseUrl(this.#with({ pathname: String(value).startsWith('/') ? value : `/${value}` })));
		}
		get search() {
			return this.#parts.search;
		}
		set search(value) {
			const text = String(value);
			this.#set(native.parseUrl(this.#with({ search: text && !text.startsWith('?') ? `?${text}` : text })));
		}
		get searchParams() {
			return this.#params;
		}
		get hash() {
			return this.#parts.hash;
		}
		set hash(value) {
			const text = String(value);
			this.#set(native.parseUrl(this.#with({ hash: text && !text.startsWith('#') ? `#${text}` : text })));
		}
		toString() {
			return this.href;
		}
		toJSON() {
			return this.href;
		}
	}

	// ---- Headers, Request, Response, fetch ----
	class Headers {
		#map = new Map();
		/** `Set-Cookie` values, each kept whole (the Fetch standard's `getSetCookie`): joined, a browser would lose all but the first cookie. */
		#cookies = [];
		constructor(init) {
			if (init === undefined || init === null) return;
			const pairs =
				init instanceof Headers || typeof init[Symbol.iterator] === 'function' ? [...init] : Object.entries(init);
			for (const [name, value] of pairs) this.append(name, value);
		}
		append(name, value) {
			const key = String(name).toLowerCase();
			if (key === 'set-cookie') return void this.#cookies.push(String(value));
			const existing = this.#map.get(key);
			this.#map.set(key, existing === undefined ? String(value) : `${existing}, ${value}`);
		}
		set(name, value) {
			const key = String(name).toLowerCase();
			if (key === 'set-cookie') return void (this.#cookies = [String(value)]);
			this.#map.set(key, String(value));
		}
		get(name) {
			const key = String(name).toLowerCase();
			if (key === 'set-cookie') return this.#cookies.length > 0 ? this.#cookies.join(', ') : null;
			return this.#map.get(key) ?? null;
		}
		getSetCookie() {
			return [...this.#cookies];
		}
		has(name) {
			const key = String(name).toLowerCase();
			return key === 'set-cookie' ? this.#cookies.length > 0 : this.#map.has(key);
		}
		delete(name) {
			const key = String(name).toLowerCase();
			if (key === 'set-cookie') this.#cookies = [];
			else this.#map.delete(key);
		}
		forEach(callback, thisArg) {
			for (const [name, value] of this) callback.call(thisArg, value, name, this);
		}
		*entries() {
			yield* this.pairs().sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
		}
		*keys() {
			for (const [name] of this.entries()) yield name;
		}
		*values() {
			for (const [, value] of this.entries()) yield value;
		}
		[Symbol.iterator]() {
			return this.entries();
		}
		/** Every header as a `[name, value]` pair, each `Set-Cookie` its own. */
		pairs() {
			return [...this.#map.entries(), ...this.#cookies.map((cookie) => ['set-cookie', cookie])];
		}
	}

	/** A body's bytes and the content type it implies. */
	/** Bytes joined into one array. */
	function joined(parts) {
		const out = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0));
		let at = 0;
		for (const part of parts) {
			out.set(part, at);
			at += part.byteLength;
		}
		return out;
	}

	/** The web's Blob: immutable bytes with a media type. */
	class Blob {
		#bytes;
		#type;
		constructor(parts = [], options = {}) {
			const pieces = [];
			for (const part of parts) {
				if (part instanceof Blob) pieces.push(part.#bytes);
				else if (part instanceof ArrayBuffer || ArrayBuffer.isView(part)) pieces.push(new Uint8Array(bytesOf(part)));
				else pieces.push(native.utf8Encode(String(part)));
			}
			this.#bytes = joined(pieces);
			this.#type = String(options.type ?? '').toLowerCase();
		}
		get size() {
			return this.#bytes.byteLength;
		}
		get type() {
			return this.#type;
		}
		slice(start = 0, end = this.size, type = '') {
			return new Blob([this.#bytes.slice(start, end)], { type });
		}
		async bytes() {
			return this.#bytes.slice();
		}
		async arrayBuffer() {
			return this.#bytes.slice().buffer;
		}
		async text() {
			return native.utf8Decode(this.#bytes, false);
		}
		/** Its bytes, unshared with it, at once (the body of a request or a form). */
		static bytesOf(blob) {
			return blob.#bytes.slice();
		}
	}

	/** A Blob with a name (a form's file). */
	class File extends Blob {
		constructor(parts, name, options = {}) {
			super(parts, options);
			this.name = String(name);
			this.lastModified = options.lastModified ?? Date.now();
		}
	}

	/** The web's FormData: named entries, text or files, in order; a body sends it as multipart/form-data. */
	class FormData {
		#entries = [];
		static #entry(name, value, filename) {
			if (!(value instanceof Blob)) return [String(name), String(value)];
			const file = value instanceof File && filename === undefined ? value : new File([value], filename ?? (value.name ?? 'blob'), { type: value.type });
			return [String(name), file];
		}
		append(name, value, filename) {
			this.#entries.push(FormData.#entry(name, value, filename));
		}
		set(name, value, filename) {
			const at = this.#entries.findIndex(([key]) => key === String(name));
			const entry = FormData.#entry(name, value, filename);
			this.delete(name);
			this.#entries.splice(at < 0 ? this.#entries.length : at, 0, entry);
		}
		get(name) {
			return this.#entries.find(([key]) => key === String(name))?.[1] ?? null;
		}
		getAll(name) {
			return this.#entries.filter(([key]) => key === String(name)).map(([, value]) => value);
		}
		has(name) {
			return this.#entries.some(([key]) => key === String(name));
		}
		delete(name) {
			this.#entries = this.#entries.filter(([key]) => key !== String(name));
		}
		forEach(callback, thisArg) {
			for (const [key, value] of this.#entries) callback.call(thisArg, value, key, this);
		}
		*entries() {
			yield* this.#entries.map(([key, value]) => [key, value]);
		}
		*keys() {
			for (const [key] of this.#entries) yield key;
		}
		*values() {
			for (const [, value] of this.#entries) yield value;
		}
		[Symbol.iterator]() {
			return this.entries();
		}
	}

	/** Quotes a multipart header parameter's value. */
	const quoted = (text) => `"${String(text).replace(/"/g, '%22').replace(/\r/g, '%0D').replace(/\n/g, '%0A')}"`;

	/** `form` as a multipart/form-data body: its bytes and its media type (with the boundary). */
	function multipartOf(form) {
		const boundary = `----LyreFormBoundary${native.randomUUID().replace(/-/g, '')}`;
		const parts = [];
		for (const [name, value] of form) {
			let head = `--${boundary}\r\nContent-Disposition: form-data; name=${quoted(name)}`;
			if (value instanceof Blob) {
				head += `; filename=${quoted(value.name)}\r\nContent-Type: ${value.type || 'application/octet-stream'}`;
			}
			parts.push(native.utf8Encode(`${head}\r\n\r\n`));
			parts.push(value instanceof Blob ? Blob.bytesOf(value) : native.utf8Encode(value));
			parts.push(native.utf8Encode('\r\n'));
		}
		parts.push(native.utf8Encode(`--${boundary}--\r\n`));
		return [joined(parts), `multipart/form-data; boundary=${boundary}`];
	}

	/** Where `needle` first stands in `haystack` from `from`, or -1. */
	function indexOfBytes(haystack, needle, from) {
		outer: for (let i = from; i <= haystack.length - needle.length; i++) {
			for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
			return i;
		}
		return -1;
	}

	/** A body of media type `type` read as a FormData (urlencoded or multipart). */
	function formOf(bytes, type) {
		const form = new FormData();
		const media = String(type ?? '').toLowerCase();
		if (media.startsWith('application/x-www-form-urlencoded')) {
			for (const [name, value] of new URLSearchParams(native.utf8Decode(bytes, false))) form.append(name, value);
			return form;
		}
		const boundary = /boundary="?([^";]+)"?/i.exec(String(type ?? ''))?.[1];
		if (!media.startsWith('multipart/form-data') || !boundary) {
			throw new TypeError('the body is not a form (urlencoded or multipart/form-data)');
		}
		const delimiter = native.utf8Encode(`--${boundary}`);
		const blank = native.utf8Encode('\r\n\r\n');
		let at = indexOfBytes(bytes, delimiter, 0);
		while (at >= 0) {
			const start = at + delimiter.length;
			if (bytes[start] === 45 && bytes[start + 1] === 45) break; // the closing `--`
			const next = indexOfBytes(bytes, delimiter, start);
			if (next < 0) throw new TypeError('the multipart body ends without its closing boundary');
			const headEnd = indexOfBytes(bytes, blank, start);
			if (headEnd < 0 || headEnd > next) throw new TypeError('a multipart part has no blank line after its headers');
			const head = native.utf8Decode(bytes.subarray(start, headEnd), false);
			const content = bytes.slice(headEnd + blank.length, Math.max(headEnd + blank.length, next - 2));
			const parameter = (key) => {
				const found = new RegExp(`(?:^|;)\\s*${key}=(?:"([^"]*)"|([^;\\s]*))`, 'i').exec(head);
				return found === null ? undefined : (found[1] ?? found[2]).replace(/%22/g, '"').replace(/%0D/g, '\r').replace(/%0A/g, '\n');
			};
			const name = parameter('name');
			const filename = parameter('filename');
			const partType = /content-type:\s*([^\r\n]+)/i.exec(head)?.[1] ?? '';
			if (name !== undefined) {
				if (filename !== undefined) form.append(name, new File([content], filename, { type: partType }));
				else form.append(name, native.utf8Decode(content, false));
			}
			at = next;
		}
		return form;
	}

	function bodyOf(body) {
		if (body === undefined || body === null) return [null, null];
		if (typeof body === 'string') return [native.utf8Encode(body), 'text/plain;charset=UTF-8'];
		if (body instanceof Blob) return [Blob.bytesOf(body), body.type || null];
		if (body instanceof FormData) return multipartOf(body);
		if (body instanceof URLSearchParams) {
			return [native.utf8Encode(body.toString()), 'application/x-www-form-urlencoded;charset=UTF-8'];
		}
		if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return [new Uint8Array(bytesOf(body)), null];
		return [native.utf8Encode(String(body)), 'text/plain;charset=UTF-8'];
	}

	class Body {
		#bytes;
		#used = false;
		#headers;
		constructor(body, headers) {
			const [bytes, type] = bodyOf(body);
			this.#bytes = bytes;
			this.#headers = headers;
			if (type && !headers.has('content-type')) headers.set('content-type', type);
		}
		/** The body's bytes (Lyre's: the web's is a stream), or `null`. */
		get body() {
			return this.#bytes;
		}
		get bodyUsed() {
			return this.#used;
		}
		#take() {
			if (this.#used) throw new TypeError('the body has already been read');
			this.#used = true;
			return this.#bytes ?? new Uint8Array(0);
		}
		async bytes() {
			return this.#take();
		}
		async arrayBuffer() {
			const bytes = this.#take();
			return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
		}
		async text() {
			return native.utf8Decode(this.#take(), false);
		}
		async json() {
			return JSON.parse(await this.text());
		}
		async blob() {
			return new Blob([this.#take()], { type: this.#headers.get('content-type') ?? '' });
		}
		async formData() {
			return formOf(this.#take(), this.#headers.get('content-type'));
		}
	}

	class Request extends Body {
		#url;
		#method;
		#headers;
		#signal;
		constructor(input, init = {}) {
			const source = input instanceof Request ? input : null;
			const headers = new Headers(init.headers ?? source?.headers);
			super(init.body ?? source?.body ?? null, headers);
			this.#url = source ? source.url : new URL(String(input)).href;
			this.#method = String(init.method ?? source?.method ?? 'GET').toUpperCase();
			this.#headers = headers;
			this.#signal = init.signal ?? null;
			if ((this.#method === 'GET' || this.#method === 'HEAD') && this.body !== null) {
				throw new TypeError(`a ${this.#method} request cannot have a body`);
			}
		}
		get url() {
			return this.#url;
		}
		get method() {
			return this.#method;
		}
		get headers() {
			return this.#headers;
		}
		get signal() {
			return this.#signal;
		}
	}

	class Response extends Body {
		#status;
		#statusText;
		#headers;
		#url;
		constructor(body = null, init = {}) {
			const headers = new Headers(init.headers);
			super(body, headers);
			this.#status = init.status ?? 200;
			if (!Number.isInteger(this.#status) || this.#status < 200 || this.#status > 599) {
				throw new RangeError(`${init.status} is not a response status`);
			}
			this.#statusText = String(init.statusText ?? '');
			this.#headers = headers;
			this.#url = init.url ?? '';
		}
		static json(data, init = {}) {
			const headers = new Headers(init.headers);
			if (!headers.has('content-type')) headers.set('content-type', 'application/json');
			return new Response(JSON.stringify(data), { ...init, headers });
		}
		static redirect(url, status = 302) {
			return new Response(null, { status, headers: { location: new URL(url).href } });
		}
		get status() {
			return this.#status;
		}
		get statusText() {
			return this.#statusText;
		}
		get ok() {
			return this.#status >= 200 && this.#status < 300;
		}
		get headers() {
			return this.#headers;
		}
		get url() {
			return this.#url;
		}
		get redirected() {
			return false;
		}
	}

	/** An event (`type`, `target`), as EventTarget dispatches it. */
	class Event {
		constructor(type) {
			this.type = String(type);
			this.target = null;
			this.defaultPrevented = false;
		}
		preventDefault() {
			this.defaultPrevented = true;
		}
	}

	/** The web's EventTarget: listeners by type, each called once per dispatch (`once` removes it). */
	class EventTarget {
		#listeners = new Map();
		addEventListener(type, listener, options) {
			if (typeof listener !== 'function' && typeof listener?.handleEvent !== 'function') return;
			const list = this.#listeners.get(type) ?? [];
			if (!list.some((entry) => entry.listener === listener)) list.push({ listener, once: Boolean(options?.once) });
			this.#listeners.set(type, list);
		}
		removeEventListener(type, listener) {
			const list = this.#listeners.get(type);
			if (list) this.#listeners.set(type, list.filter((entry) => entry.listener !== listener));
		}
		dispatchEvent(event) {
			event.target = this;
			const handler = this[`on${event.type}`];
			if (typeof handler === 'function') handler.call(this, event);
			for (const entry of [...(this.#listeners.get(event.type) ?? [])]) {
				if (entry.once) this.removeEventListener(event.type, entry.listener);
				if (typeof entry.listener === 'function') entry.listener.call(this, event);
				else entry.listener.handleEvent(event);
			}
			return !event.defaultPrevented;
		}
	}

	/** Only AbortSignal's own makers construct one and abort it. */
	const ABORT_KEY = Symbol('lyre.abort');

	/** Signals an abort (AbortController's, or `AbortSignal.timeout`'s); `fetch` takes one. */
	class AbortSignal extends EventTarget {
		#aborted = false;
		#reason = undefined;
		/** For `AbortSignal.timeout`: when it aborts, and the timer armed while anyone listens. */
		#deadline = undefined;
		#timer = undefined;
		#listeners = new Set();
		#onabort = null;
		constructor(key) {
			if (key !== ABORT_KEY) throw new TypeError('Illegal constructor');
			super();
		}
		get aborted() {
			this.#due();
			return this.#aborted;
		}
		get onabort() {
			return this.#onabort;
		}
		set onabort(handler) {
			this.#onabort = handler;
			this.#listening();
		}
		addEventListener(type, listener, options) {
			super.addEventListener(type, listener, options);
			if (type === 'abort' && listener) this.#listeners.add(listener);
			this.#listening();
		}
		removeEventListener(type, listener) {
			super.removeEventListener(type, listener);
			if (type === 'abort') this.#listeners.delete(listener);
			this.#listening();
		}
		/** A timeout's signal past its deadline aborts when next asked. */
		#due() {
			if (this.#deadline !== undefined && !this.#aborted && Date.now() >= this.#deadline) {
				this[ABORT_KEY](new DOMException('The operation timed out', 'TimeoutError'));
			}
		}
		/**
		 * A timeout's timer runs only while something listens (a pending fetch), so
		 * signals made and left hold no timer against the runtime's limit.
		 */
		#listening() {
			if (this.#deadline === undefined || this.#aborted) return;
			const wanted = this.#listeners.size > 0 || typeof this.#onabort === 'function';
			if (wanted && this.#timer === undefined) {
				this.#timer = setTimeout(() => {
					this.#timer = undefined;
					this.#due();
				}, Math.max(0, this.#deadline - Date.now()));
			} else if (!wanted && this.#timer !== undefined) {
				clearTimeout(this.#timer);
				this.#timer = undefined;
			}
		}
		get reason() {
			this.#due();
			return this.#reason;
		}
		throwIfAborted() {
			if (this.aborted) throw this.#reason;
		}
		/** Aborts (once) for `reason`. */
		[ABORT_KEY](reason) {
			if (this.#aborted) return;
			this.#aborted = true;
			if (this.#timer !== undefined) clearTimeout(this.#timer);
			this.#timer = undefined;
			this.#reason = reason === undefined ? new DOMException('This operation was aborted', 'AbortError') : reason;
			this.dispatchEvent(new Event('abort'));
		}
		static abort(reason) {
			const signal = new AbortSignal(ABORT_KEY);
			signal[ABORT_KEY](reason);
			return signal;
		}
		static timeout(milliseconds) {
			const signal = new AbortSignal(ABORT_KEY);
			signal.#deadline = Date.now() + Math.max(0, Number(milliseconds) || 0);
			return signal;
		}
		static any(signals) {
			const signal = new AbortSignal(ABORT_KEY);
			const sources = [...signals];
			const listeners = [];
			const follow = (each) => {
				signal[ABORT_KEY](each.reason);
				// Aborted: its sources need not hold its listeners any more.
				sources.forEach((source, i) => source.removeEventListener('abort', listeners[i]));
			};
			for (const each of sources) {
				if (each.aborted) {
					follow(each);
					break;
				}
				const listener = () => follow(each);
				listeners.push(listener);
				each.addEventListener('abort', listener, { once: true });
			}
			return signal;
		}
	}
	class AbortController {
		#signal = new AbortSignal(ABORT_KEY);
		get signal() {
			return this.#signal;
		}
		abort(reason) {
			this.#signal[ABORT_KEY](reason);
		}
	}

	/** `pending`, or its signal's reason once the signal aborts first. */
	function abortable(pending, signal) {
		return new Promise((resolve, reject) => {
			const onAbort = () => reject(signal.reason);
			signal.addEventListener('abort', onAbort, { once: true });
			pending.then(
				(value) => {
					signal.removeEventListener('abort', onAbort);
					resolve(value);
				},
				(error) => {
					signal.removeEventListener('abort', onAbort);
					reject(error);
				},
			);
		});
	}

	/**
	 * `fetch`, through Lyre's outbound HTTP client (bounded in time and size). A
	 * signal that aborts rejects it with the signal's reason at once (the request
	 * itself runs on to its bounds, its answer dropped).
	 */
	async function fetch(input, init = {}) {
		const request = new Request(input, init);
		const signal = request.signal;
		signal?.throwIfAborted?.();
		const pending =
			request.body === null
				? native.fetch(request.url, request.method, request.headers.pairs())
				: native.fetch(request.url, request.method, request.headers.pairs(), request.body);
		const answer = await (signal?.addEventListener ? abortable(pending, signal) : pending);
		const response = new Response(answer.body.length ? answer.body : null, {
			status: answer.status < 200 ? 200 : answer.status,
			statusText: answer.statusText,
			headers: answer.headers,
			url: answer.url,
		});
		return response;
	}

	class DOMException extends Error {
		constructor(message = '', name = 'Error') {
			super(message);
			this.name = name;
		}
	}

	// ---- crypto ----
	const DIGESTS = { 'SHA-1': 'sha1', 'SHA-256': 'sha256', 'SHA-384': 'sha384', 'SHA-512': 'sha512' };
	const crypto = {
		randomUUID: () => native.randomUUID(),
		getRandomValues(array) {
			if (!ArrayBuffer.isView(array) || array instanceof Float32Array || array instanceof Float64Array) {
				throw new TypeError('getRandomValues takes an integer typed array');
			}
			if (array.byteLength > 65536) throw new DOMException('at most 65536 bytes at a time', 'QuotaExceededError');
			new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(native.randomBytes(array.byteLength));
			return array;
		},
		subtle: {
			async digest(algorithm, data) {
				const name = String(typeof algorithm === 'string' ? algorithm : algorithm?.name).toUpperCase();
				if (!DIGESTS[name]) throw new DOMException(`the digest ${name} is not supported`, 'NotSupportedError');
				const digest = native.digest(DIGESTS[name], bytesOf(data));
				return digest.buffer.slice(digest.byteOffset, digest.byteOffset + digest.byteLength);
			},
		},
	};

	// ---- timers ----
	const timers = new Map();
	let nextTimer = 1;
	function arm(callback, delay, args, repeat) {
		const id = nextTimer++;
		const ms = Math.min(Math.max(0, Number(delay) || 0), 2 ** 31 - 1);
		timers.set(id, { callback, args, repeat: repeat ? ms : null });
		native.setTimer(id, ms);
		return id;
	}
	const setTimeout = (callback, delay, ...args) => arm(callback, delay, args, false);
	const setInterval = (callback, delay, ...args) => arm(callback, delay, args, true);
	function clearTimeout(id) {
		if (timers.delete(id)) native.clearTimer(id);
	}
	/** Called by the worker when timer `id` is due. */
	function fireTimer(id) {
		const timer = timers.get(id);
		if (!timer) return;
		if (timer.repeat === null) timers.delete(id);
		else native.setTimer(id, timer.repeat);
		if (typeof timer.callback === 'function') timer.callback(...timer.args);
	}

	// ---- structuredClone, atob, btoa ----
	function structuredClone(value, seen = new Map()) {
		if (value === null || typeof value !== 'object') {
			if (typeof value === 'function' || typeof value === 'symbol') {
				throw new DOMException(`${String(value)} could not be cloned`, 'DataCloneError');
			}
			return value;
		}
		if (seen.has(value)) return seen.get(value);
		let copy;
		if (value instanceof Date) copy = new Date(value.getTime());
		else if (value instanceof RegExp) copy = new RegExp(value.source, value.flags);
		else if (value instanceof ArrayBuffer) copy = value.slice(0);
		else if (ArrayBuffer.isView(value)) copy = new value.constructor(structuredClone(value.buffer, seen), value.byteOffset, value.length);
		else if (value instanceof Map) {
			copy = new Map();
			seen.set(value, copy);
			for (const [k, v] of value) copy.set(structuredClone(k, seen), structuredClone(v, seen));
			return copy;
		} else if (value instanceof Set) {
			copy = new Set();
			seen.set(value, copy);
			for (const v of value) copy.add(structuredClone(v, seen));
			return copy;
		} else if (value instanceof Error) {
			copy = new value.constructor(value.message);
		} else {
			copy = Array.isArray(value) ? [] : {};
			seen.set(value, copy);
			for (const key of Object.keys(value)) copy[key] = structuredClone(value[key], seen);
			return copy;
		}
		seen.set(value, copy);
		return copy;
	}

	const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
	function btoa(text) {
		const input = String(text);
		let out = '';
		for (let i = 0; i < input.length; i += 3) {
			const codes = [input.charCodeAt(i), input.charCodeAt(i + 1), input.charCodeAt(i + 2)];
			if (codes.some((c) => c > 255)) throw new DOMException('btoa takes Latin-1 text', 'InvalidCharacterError');
			const [a, b, c] = codes;
			const n = (a << 16) | ((b || 0) << 8) | (c || 0);
			out += BASE64[(n >> 18) & 63] + BASE64[(n >> 12) & 63];
			out += Number.isNaN(b) ? '=' : BASE64[(n >> 6) & 63];
			out += Number.isNaN(c) ? '=' : BASE64[n & 63];
		}
		return out;
	}
	function atob(encoded) {
		const input = String(encoded).replace(/[\t\n\f\r ]/g, '').replace(/={1,2}$/, '');
		if (/[^A-Za-z0-9+/]/.test(input) || input.length % 4 === 1) {
			throw new DOMException('atob takes base64 text', 'InvalidCharacterError');
		}
		let out = '';
		for (let i = 0; i < input.length; i += 4) {
			const n = [0, 1, 2, 3].reduce((acc, k) => (acc << 6) | (i + k < input.length ? BASE64.indexOf(input[i + k]) : 0), 0);
			out += String.fromCharCode((n >> 16) & 255);
			if (i + 2 < input.length) out += String.fromCharCode((n >> 8) & 255);
			if (i + 3 < input.length) out += String.fromCharCode(n & 255);
		}
		return out;
	}

	/** Bytes as a string in which each character is one byte (what btoa takes). */
	function latin1Of(bytes) {
		let out = '';
		for (let i = 0; i < bytes.length; i += 8192) out += String.fromCharCode(...bytes.subarray(i, i + 8192));
		return out;
	}

	/**
	 * Node's `Buffer`, the part applications use most: bytes that are made from and
	 * read as text (`utf8`, `hex`, `base64`, `base64url`, `latin1`), compared,
	 * joined and sliced. Harper hands scripts Buffers (a content type's
	 * `deserialize` gets one), so code written for it calls `toString()` on them.
	 */
	class Buffer extends Uint8Array {
		static from(value, encodingOrOffset, length) {
			if (typeof value === 'string') return Buffer.#ofText(value, encodingOrOffset ?? 'utf8');
			if (value instanceof ArrayBuffer) {
				const offset = encodingOrOffset ?? 0;
				return new Buffer(value, offset, length ?? value.byteLength - offset);
			}
			if (ArrayBuffer.isView(value)) {
				const copy = new Buffer(value.byteLength);
				copy.set(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
				return copy;
			}
			if (value?.type === 'Buffer' && Array.isArray(value.data)) return Buffer.from(value.data);
			if (value !== null && typeof value === 'object' && typeof value.length === 'number') {
				const copy = new Buffer(value.length);
				for (let i = 0; i < value.length; i++) copy[i] = Number(value[i]) & 255;
				return copy;
			}
			throw new TypeError('Buffer.from takes a string, an array, an ArrayBuffer or a typed array');
		}
		static alloc(size, fill = 0) {
			const buffer = new Buffer(size);
			if (typeof fill === 'number') buffer.fill(fill & 255);
			else if (typeof fill === 'string' && fill.length > 0) {
				const pattern = Buffer.from(fill);
				for (let i = 0; i < size; i++) buffer[i] = pattern[i % pattern.length];
			}
			return buffer;
		}
		static allocUnsafe(size) {
			return new Buffer(size);
		}
		static isBuffer(value) {
			return value instanceof Buffer;
		}
		static byteLength(value, encoding) {
			return typeof value === 'string' ? Buffer.from(value, encoding).length : value.byteLength;
		}
		static concat(list, total) {
			const length = total ?? list.reduce((sum, part) => sum + part.length, 0);
			const out = new Buffer(length);
			let at = 0;
			for (const part of list) {
				if (at >= length) break;
				const piece = part.subarray(0, length - at);
				out.set(piece, at);
				at += piece.length;
			}
			return out;
		}
		static #ofText(text, encoding) {
			const wrap = (bytes) => new Buffer(bytes.buffer, bytes.byteOffset, bytes.byteLength);
			switch (String(encoding).toLowerCase()) {
				case 'utf8':
				case 'utf-8':
					return wrap(native.utf8Encode(text));
				case 'hex': {
					const pairs = text.match(/^(?:[0-9a-fA-F]{2})*/)[0];
					const out = new Buffer(pairs.length / 2);
					for (let i = 0; i < out.length; i++) out[i] = parseInt(pairs.slice(2 * i, 2 * i + 2), 16);
					return out;
				}
				case 'base64':
				case 'base64url': {
					const standard = text.replace(/-/g, '+').replace(/_/g, '/').replace(/[^A-Za-z0-9+/]/g, '');
					const padded = standard + '='.repeat((4 - (standard.length % 4)) % 4);
					return Buffer.#ofText(atob(padded), 'latin1');
				}
				case 'latin1':
				case 'binary':
				case 'ascii': {
					const out = new Buffer(text.length);
					for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i) & 255;
					return out;
				}
				default:
					throw new TypeError(`Unknown encoding: ${encoding}`);
			}
		}
		toString(encoding = 'utf8', start = 0, end = this.length) {
			const bytes = this.subarray(start, end);
			switch (String(encoding).toLowerCase()) {
				case 'utf8':
				case 'utf-8':
					return native.utf8Decode(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), false);
				case 'hex':
					return Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
				case 'base64':
					return btoa(latin1Of(bytes));
				case 'base64url':
					return btoa(latin1Of(bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
				case 'latin1':
				case 'binary':
				case 'ascii':
					return latin1Of(bytes);
				default:
					throw new TypeError(`Unknown encoding: ${encoding}`);
			}
		}
		toJSON() {
			return { type: 'Buffer', data: Array.from(this) };
		}
		equals(other) {
			return other.length === this.length && this.every((byte, i) => byte === other[i]);
		}
		/** Node's `slice` shares the bytes, as `subarray` does. */
		slice(start, end) {
			return this.subarray(start, end);
		}
	}

	/** The digests Node's `createHash` and `createHmac` name, as the native side names them. */
	const NODE_DIGESTS = { sha1: 'sha1', sha256: 'sha256', sha384: 'sha384', sha512: 'sha512' };

	/** A Node hash (`createHash`) or HMAC (`createHmac`): `update` as often as wanted, then `digest` once. */
	class NodeHash {
		#algorithm;
		#key;
		#parts = [];
		#done = false;
		constructor(algorithm, key) {
			const name = NODE_DIGESTS[String(algorithm).toLowerCase().replace('-', '')];
			if (!name) throw new Error(`Digest method not supported: ${algorithm}`);
			this.#algorithm = name;
			this.#key = key === undefined ? undefined : Buffer.from(key);
		}
		update(data, encoding) {
			if (this.#done) throw new Error('Digest already called');
			this.#parts.push(typeof data === 'string' ? Buffer.from(data, encoding ?? 'utf8') : Buffer.from(data));
			return this;
		}
		digest(encoding) {
			if (this.#done) throw new Error('Digest already called');
			this.#done = true;
			const data = Buffer.concat(this.#parts);
			const bytes =
				this.#key === undefined ? native.digest(this.#algorithm, data) : native.hmac(this.#algorithm, this.#key, data);
			const result = Buffer.from(bytes);
			return encoding === undefined || encoding === 'buffer' ? result : result.toString(encoding);
		}
	}

	/**
	 * The Node built-in modules Lyre provides (`import … from 'node:crypto'`,
	 * `require('buffer')`), the parts applications use most; the others are refused
	 * by name when a component loads.
	 */
	const nodeModules = {
		crypto: {
			createHash: (algorithm) => new NodeHash(algorithm),
			createHmac: (algorithm, key) => new NodeHash(algorithm, typeof key === 'string' ? Buffer.from(key) : key),
			randomUUID: () => native.randomUUID(),
			randomBytes: (size) => {
				const out = Buffer.alloc(size);
				for (let at = 0; at < size; at += 65536) out.set(native.randomBytes(Math.min(65536, size - at)), at);
				return out;
			},
			getRandomValues: (array) => crypto.getRandomValues(array),
			timingSafeEqual(a, b) {
				if (a.byteLength !== b.byteLength) throw new RangeError('Input buffers must have the same byte length');
				let differ = 0;
				for (let i = 0; i < a.byteLength; i++) differ |= a[i] ^ b[i];
				return differ === 0;
			},
			webcrypto: crypto,
			subtle: crypto.subtle,
		},
		buffer: { Buffer, Blob, File },
	};
	Object.defineProperty(globalThis, '__lyre_node', { value: nodeModules, enumerable: false });

	Object.defineProperty(globalThis, '__lyre_timer', { value: fireTimer, enumerable: false });
	Object.assign(globalThis, {
		TextEncoder,
		TextDecoder,
		URLSearchParams,
		URL,
		Headers,
		Request,
		Response,
		fetch,
		Blob,
		File,
		FormData,
		DOMException,
		Event,
		EventTarget,
		AbortController,
		AbortSignal,
		crypto,
		setTimeout,
		setInterval,
		clearTimeout,
		clearInterval: clearTimeout,
		structuredClone: (value) => structuredClone(value),
		atob,
		btoa,
		Buffer,
		setImmediate: (callback, ...args) => setTimeout(callback, 0, ...args),
		clearImmediate: clearTimeout,
	});
	globalThis.queueMicrotask ??= (callback) => {
		Promise.resolve().then(callback);
	};
});
