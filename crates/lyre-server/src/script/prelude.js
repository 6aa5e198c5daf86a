// The API scripts see, as Harper's: Resource, tables, databases, logger, console,
// and the dispatch of REST requests to exported resources. Evaluated once per
// runtime, after web.js and before any component's module, as a function given
// Lyre's native functions (script/native.rs); nothing of them stays global.
(function (native) {
	'use strict';

	const CONTEXT_HANDLE = Symbol('lyre.handle'); // the request a context belongs to
	const TABLE = Symbol('lyre.table'); // {database, table, primaryKey} of a table's class
	const BUILT_IN = Symbol('lyre.builtIn'); // classes Lyre made (Resource, table classes)
	const LOADED = Symbol('lyre.loaded'); // a legacy instance's record was read
	const UNCHECKED = 0;
	/** What a URLSearchParams was made with (web.js `PAIRS`), for targets made as literals. */
	const SEARCH_PAIRS = globalThis.__lyre_search_pairs;
	delete globalThis.__lyre_search_pairs;

	/** An error with a status (Harper's ClientError). */
	class ClientError extends Error {
		constructor(message, statusCode = 400) {
			super(message);
			this.statusCode = statusCode;
		}
	}

	/** An error of the server's own (Harper's ServerError). */
	class ServerError extends Error {
		constructor(message, statusCode = 500) {
			super(message);
			this.statusCode = statusCode;
		}
	}

	/** A refused permission (Harper's AccessViolation): 401 without a user, 403 with one. */
	class AccessViolation extends Error {
		constructor(message, statusCode) {
			super(message);
			this.statusCode = statusCode;
		}
	}

	function accessViolation(user) {
		return user ? new AccessViolation('Unauthorized access to resource', 403) : new AccessViolation('Must login', 401);
	}

	/** What a resource method is asked about: an id, or a query on the collection. */
	class RequestTarget extends URLSearchParams {
		constructor(search) {
			super(search ?? '');
			/** The query string, without `?` (REST's grammar reads it). */
			this.search = search ?? '';
			this.id = undefined;
			/** The path below the resource's own (`/abc` of `/Thing/abc`), as Harper's. */
			this.pathname = '';
		}
		/** The path below the resource and the query, as Harper's (`/abc?x=1`). */
		toString() {
			const search = super.toString();
			return search ? `${this.pathname}?${search}` : this.pathname;
		}
	}

	/** The part of the request's `pathname` below the resource exported at `path`. */
	function pathBelow(path, pathname) {
		const prefix = `/${path}`;
		if (pathname.startsWith(prefix) && (pathname.length === prefix.length || pathname[prefix.length] === '/')) {
			return pathname.slice(prefix.length);
		}
		const second = pathname.indexOf('/', 1);
		return second < 0 ? '' : pathname.slice(second);
	}

	/** What a query may say besides its conditions' text, as a RequestTarget's properties. */
	const QUERY_PARTS = ['conditions', 'operator', 'limit', 'offset', 'select', 'sort'];
	/** Each request target's query string, parsed once when code first reads a part of it. */
	const parsedQueries = new WeakMap();

	/** `value` and everything in it, frozen. */
	function deepFreeze(value) {
		if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
			Object.freeze(value);
			for (const inner of Object.values(value)) deepFreeze(inner);
		}
		return value;
	}

	/**
	 * The query parts of a request to a table's class, read from its query string as
	 * REST reads it (`target.conditions`, `target.limit`, … as Harper's targets show
	 * them); code that sets a part sets its own value, which the search then runs.
	 * A target of any other resource has none.
	 */
	for (const part of QUERY_PARTS) {
		Object.defineProperty(RequestTarget.prototype, part, {
			get() {
				const handle = this[CONTEXT_HANDLE];
				if (handle === undefined) return undefined;
				let parsed = parsedQueries.get(this);
				if (parsed === undefined) {
					// Parsed for the table whose class the request was made to (none: `{}`).
					parsed = native.parseQuery(handle, this.search ?? '') ?? {};
					// Edited in place, these would be ignored (the query string's are
					// searched): frozen, so an edit fails loudly; set them instead.
					for (const part of ['sort', 'select']) if (parsed[part] !== undefined) deepFreeze(parsed[part]);
					parsedQueries.set(this, parsed);
				}
				return parsed[part];
			},
			set(value) {
				Object.defineProperty(this, part, { value, writable: true, enumerable: true, configurable: true });
			},
			configurable: true,
		});
	}

	/**
	 * The query a search runs: a query string, a query object, or a request's
	 * target, whose query string the parts code set on the target override
	 * (`target.conditions = [...]`, `target.limit = 1`), as in Harper, where code
	 * edits the target its query string was parsed into.
	 */
	function queryOf(target) {
		if (typeof target === 'string') return target;
		if (target?.query) return target.query;
		if (!(target instanceof RequestTarget)) return '';
		// Conditions code read (and may have edited in place) are searched as they now stand.
		const read = parsedQueries.get(target);
		const set = QUERY_PARTS.filter(
			(part) =>
				(Object.hasOwn(target, part) && target[part] !== undefined) ||
				(read !== undefined && (part === 'conditions' || part === 'operator') && read[part] !== undefined),
		);
		if (set.length === 0) return target.search;
		const query = { search: target.search };
		for (const part of set) query[part] = target[part];
		return query;
	}

	/** The target a static call was given: a RequestTarget, a query object, or an id. */
	function targetOf(argument) {
		if (argument instanceof RequestTarget) return argument;
		const target = new RequestTarget();
		if (argument === null) {
			target.isCollection = true;
			target.id = null;
		} else if (argument && typeof argument === 'object' && !Array.isArray(argument)) {
			// A query object: {conditions, operator, limit, offset, select, sort, id}.
			Object.assign(target, argument);
			target.query = argument;
			target.isCollection = argument.id === undefined;
		} else {
			target.id = argument;
		}
		return target;
	}

	/**
	 * The handle a table call runs as: the request's user when the target asks for
	 * its permissions checked (a REST request's target carries its request, so it
	 * does when passed on to another table), or the resource runs for a request.
	 */
	function handleFor(resource, target) {
		if (target?.checkPermission && target[CONTEXT_HANDLE] !== undefined) return target[CONTEXT_HANDLE];
		const context = resource?.getContext?.();
		const checked = target?.checkPermission || context?.authorize;
		return checked && context?.[CONTEXT_HANDLE] !== undefined ? context[CONTEXT_HANDLE] : UNCHECKED;
	}

	// ---- Resource ----
	const WRITES_TAKE_DATA = new Set(['put', 'patch', 'post', 'update', 'create']);

	/** Runs `method` of a new instance of `Class`, as Harper's static methods do. */
	async function invoke(Class, method, argument, data, context) {
		return invokeNow(Class, method, argument, data, context);
	}

	/**
	 * `invoke` without its promise: the handler's own result (a value, or its
	 * promise), or a promise when the instance-loading mode reads the record or
	 * asks the permission hooks first. REST's dispatch calls it directly.
	 */
	function invokeNow(Class, method, argument, data, context) {
		const target = argument instanceof RequestTarget ? argument : targetOf(argument);
		const legacy = Class.loadAsInstance !== false;
		if (WRITES_TAKE_DATA.has(method) && data === undefined && argument && typeof argument === 'object' && !(argument instanceof RequestTarget)) {
			// put(record): the id is the record's own.
			data = argument;
			target.id = Class[TABLE] ? argument[Class[TABLE].primaryKey] : undefined;
			target.isCollection = false;
			delete target.query;
		}
		const resource = new Class(target.id ?? (target.isCollection ? null : undefined), context);
		const loads = legacy && Class[TABLE] && target.id !== undefined && target.id !== null;
		if (loads || (legacy && context?.authorize)) {
			return (async () => {
				// The record is read first (whatever the user may read: the hooks decide),
				// so allowCreate is asked for a record that does not exist yet.
				if (loads) await resource.load(UNCHECKED);
				if (context?.authorize) {
					await authorize(resource, method, target, data, context);
					// The table's own allowRead is the role's: read again as the user, so
					// attributes the role may not read are left out.
					if (loads && method === 'get' && resource.allowRead === Class[TABLE].base.prototype.allowRead) {
						await resource.load(context[CONTEXT_HANDLE]);
					}
				} else if (loads && method === 'get' && target.checkPermission && target[CONTEXT_HANDLE] !== undefined) {
					// A request's target passed on: read as its user.
					await resource.load(target[CONTEXT_HANDLE]);
				}
				return callHandler(Class, resource, method, target, data, legacy);
			})();
		}
		// A read of the newer mode without callHandler's call (QuickJS calls are dear).
		if (!legacy && method === 'get' && typeof resource.get === 'function') return resource.get(target);
		return callHandler(Class, resource, method, target, data, legacy);
	}

	function callHandler(Class, resource, method, target, data, legacy) {
		const handler = resource[method];
		if (typeof handler !== 'function') {
			if (method === 'get') return undefined;
			throw missingMethod(Class, resource, method);
		}
		if (method === 'get' || method === 'delete') return handler.call(resource, target);
		return legacy ? handler.call(resource, data, target) : handler.call(resource, target, data);
	}

	async function authorize(resource, method, target, data, context) {
		const user = context.user ?? null;
		let allowed;
		if (method === 'get' || method === 'search') allowed = await resource.allowRead(user, target, context);
		else if (method === 'delete') allowed = await resource.allowDelete(user, target, context);
		else if (method === 'post' || method === 'create') allowed = await resource.allowCreate(user, data, context);
		else if (resource.doesExist?.() === false) allowed = await resource.allowCreate(user, data, context);
		else allowed = await resource.allowUpdate(user, data, context);
		if (!allowed) throw accessViolation(user);
	}

	function missingMethod(Class, resource, method) {
		const error = new ClientError(`The ${Class.name} does not have a ${method} method implemented`, 405);
		error.allow = ['get', 'put', 'post', 'delete', 'patch'].filter((m) => typeof resource[m] === 'function');
		return error;
	}

	/** Harper's Resource: an endpoint; extend it and export the class. */
	class Resource {
		#id;
		#context;
		constructor(id, context) {
			this.#id = id;
			this.#context = context;
		}
		/** The id this instance was made for (`undefined` for the resource itself, `null` for the collection). */
		getId() {
			return this.#id;
		}
		/** The request's context: user, headers, method, url, responseHeaders. */
		getContext() {
			return this.#context;
		}
		/** The request's user, when it has one. */
		getCurrentUser() {
			return this.#context?.user ?? null;
		}
		get isCollection() {
			return this.#id === null;
		}
		allowRead(user) {
			return Boolean(user?.role?.permission?.super_user);
		}
		allowUpdate(user) {
			return Boolean(user?.role?.permission?.super_user);
		}
		allowCreate(user) {
			return Boolean(user?.role?.permission?.super_user);
		}
		allowDelete(user) {
			return Boolean(user?.role?.permission?.super_user);
		}
		post(first, second) {
			const legacy = this.constructor.loadAsInstance !== false;
			const [target, data] = legacy ? [second, first] : [first, second];
			if ((target?.isCollection || this.isCollection) && typeof this.create === 'function') {
				// A table's create answers the record; a post answers its id, as Harper's.
				const key = this.constructor.primaryKey;
				const idOf = (created) => (key !== undefined && created !== null && typeof created === 'object' ? created[key] : created);
				if (!legacy) return Promise.resolve(this.create(target, data)).then(idOf);
				// The instance-loading mode answers a creation as Harper's does: 201, Location.
				const context = this.getContext();
				return Promise.resolve(this.create(data, target)).then(idOf).then((id) => {
					if (context) {
						context.createdResource = true;
						context.newLocation = id;
					}
					return id;
				});
			}
			throw missingMethod(this.constructor, this, 'post');
		}
		static get(target, context) {
			return invoke(this, 'get', target, undefined, context);
		}
		static put(target, data, context) {
			return invoke(this, 'put', target, data, context);
		}
		static patch(target, data, context) {
			return invoke(this, 'patch', target, data, context);
		}
		static post(target, data, context) {
			return invoke(this, 'post', target, data, context);
		}
		static delete(target, context) {
			return invoke(this, 'delete', target, undefined, context);
		}
		static getNewId() {
			return crypto.randomUUID();
		}
	}
	Resource[BUILT_IN] = true;

	// ---- Tables ----
	/** Search results: an array that is also async-iterable (Harper returns an async iterable). */
	function results(records, freeze) {
		if (freeze) records.forEach(Object.freeze);
		Object.defineProperty(records, Symbol.asyncIterator, {
			// Not `yield*`: in an async generator it would ask `records` for this very iterator.
			value: async function* () {
				for (const record of records) yield record;
			},
		});
		Object.defineProperty(records, 'asArray', { get: () => Promise.resolve(records) });
		return records;
	}

	// ---- Computed attributes ----
	/** Functions scripts registered (`setComputedAttribute`), by `database.table`, then attribute. */
	const computedResolvers = new Map();
	/** Functions registered since the last component's registration: `[database, table, attribute]`. */
	const registeredComputed = [];
	/** `@computed(from:)` expressions, compiled once each. */
	const expressions = new Map();

	/** An expression as a function of a record whose attributes are its names (missing ones are `undefined`). */
	function compiledExpression(from) {
		let compiled = expressions.get(from);
		if (!compiled) {
			const scope = new Proxy({}, { has: (t, k) => typeof k === 'string' && k !== '__record' && !(k in globalThis) });
			compiled = new Function('__scope', '__record', `with (__scope) { with (__record) { return (${from}\n); } }`).bind(
				null,
				scope,
			);
			expressions.set(from, compiled);
		}
		return compiled;
	}

	/** What computes `attribute` of `database.table`: a registered function first, else its expression. */
	function resolverFor(database, table, attribute) {
		const own = computedResolvers.get(`${database}.${table}`)?.get(attribute.name);
		if (own) return own;
		if (attribute.computed.from != null) return compiledExpression(attribute.computed.from);
		return undefined;
	}

	/**
	 * Gives a record read by a script its computed attributes the read left out, as
	 * getters (enumerable only when `@enumerable`, as Harper's).
	 */
	function withComputed(info, record) {
		if (!record || typeof record !== 'object' || !info.computed.length) return record;
		for (const attribute of info.computed) {
			if (Object.prototype.hasOwnProperty.call(record, attribute.name)) continue;
			const resolve = resolverFor(info.database, info.table, attribute);
			if (!resolve) continue;
			Object.defineProperty(record, attribute.name, {
				get() {
					return resolve(this);
				},
				enumerable: attribute.computed.enumerable,
				configurable: true,
			});
		}
		return record;
	}

	/** The value of a registered function for a record (the writer's and request threads' call). */
	globalThis.__lyre_compute = (database, table, attribute, record) =>
		computedResolvers.get(`${database}.${table}`)?.get(attribute)?.(record);

	// ---- Caching sources ----
	/** Sources scripts gave tables, by `database.table`. */
	const sources = new Map();
	/** Sources declared since the last component's registration. */
	const declaredSources = [];

	/** Asks a table's source for record `id`: `{record, expiration}`, or no record. */
	async function askSource(database, table, id) {
		const declared = sources.get(`${database}.${table}`);
		if (!declared) throw new ServerError(`the table ${table} has no source`);
		let answer = await declared.Source.get(id, { requestContext: null });
		if (answer && typeof answer === 'object' && answer.status > 0 && answer.headers) {
			if (answer.status === 404 || answer.status === 410) return { record: null };
			if (answer.status >= 300) {
				// Harper answers the client the source's error status; a redirect is no record.
				const status = answer.status >= 400 && answer.status < 600 ? answer.status : 502;
				throw new ServerError(`the source answered ${answer.status}`, status);
			}
			answer = answer.data !== undefined ? answer.data : typeof answer.json === 'function' ? await answer.json() : answer.body;
		}
		if (answer === undefined || answer === null) return { record: null };
		if (typeof answer !== 'object' || Array.isArray(answer)) {
			throw new ServerError(`the source ${declared.name} answered something that is not a record`, 502);
		}
		return { record: { ...answer }, expiration: declared.expiration };
	}

	/**
	 * The source's answer as Lyre's cache asks for it (`__lyre_source`): an error
	 * stating its HTTP status (`ClientError`, `statusCode = 403`) comes back as
	 * `{failed: status, message}`, the client's answer as in Harper; any other
	 * failure is thrown, the source's failure (502).
	 */
	async function answerSource(database, table, id) {
		try {
			return await askSource(database, table, id);
		} catch (error) {
			const status = error !== null && typeof error === 'object' ? error.statusCode : undefined;
			if (!Number.isInteger(status) || status < 400 || status >= 600) throw error;
			return { failed: status, message: typeof error.message === 'string' ? error.message : String(error) };
		}
	}

	/**
	 * A record a script reads from a table with a source: the stored copy, or the
	 * source's answer, stored (REST reads go through Lyre's cache, which also
	 * renews expired copies).
	 */
	async function readThrough(info, id, handle) {
		const { database, table, primaryKey } = info;
		const stored = withComputed(info, native.get(database, table, id, handle));
		if (stored !== undefined || !sources.has(`${database}.${table}`)) return stored;
		const { record } = await askSource(database, table, id);
		if (!record) return undefined;
		record[primaryKey] = id;
		await native.put(database, table, id, record, UNCHECKED);
		return withComputed(info, native.get(database, table, id, handle));
	}

	// ---- Transactions (`transaction`) ----
	/**
	 * Writes that commit together (Harper's TransactionSet): a table call whose
	 * context holds an open one joins it instead of writing at once.
	 */
	class TransactionSet {
		#writes = [];
		constructor(handle) {
			this[CONTEXT_HANDLE] = handle;
			this.open = true;
			this.timestamp = Date.now();
		}
		/** Queues a write (`put`, `patch`, `delete` or `create`, as `native` takes them), checked as `handle`'s user. */
		add(kind, database, table, first, second, handle) {
			if (!this.open) throw new Error('this transaction is no longer open');
			this.#writes.push([kind, database, table, first ?? null, second ?? null, handle]);
		}
		/** Commits the queued writes together (one database's); their answers. */
		commit() {
			if (!this.open) return Promise.resolve([]);
			this.open = false;
			const writes = this.#writes.splice(0);
			return writes.length ? native.transact(writes) : Promise.resolve([]);
		}
		/** Drops the queued writes. */
		abort() {
			this.open = false;
			this.#writes.length = 0;
		}
		/** Reads always see what is committed (Lyre reads from the latest snapshot). */
		resetReadSnapshot() {}
	}

	/** The open transaction a resource's calls join, if its context holds one. */
	function transactionOf(resource) {
		const context = resource.getContext?.();
		const open = context instanceof TransactionSet ? context : context?.transaction;
		return open instanceof TransactionSet && open.open ? open : undefined;
	}

	/**
	 * Harper's `transaction([context], callback)`: runs `callback(transaction)`; the
	 * table calls made with the context (or the transaction itself) as their context
	 * commit together when it returns (or its promise resolves), or not at all when
	 * it throws. Within an open transaction of the context, it just runs `callback`.
	 */
	function transaction(context, callback) {
		if (typeof context === 'function' && callback === undefined) {
			callback = context;
			context = {};
		} else if (!context) {
			context = {};
		} else if (context.transaction?.open && typeof callback === 'function') {
			return callback(context.transaction);
		}
		if (typeof callback !== 'function') throw new Error('Callback function must be provided to transaction');
		const handle = context[CONTEXT_HANDLE] ?? context.getContext?.()?.[CONTEXT_HANDLE] ?? UNCHECKED;
		const open = (context.transaction = new TransactionSet(handle));
		let result;
		try {
			result = callback(open);
		} catch (error) {
			open.abort();
			throw error;
		}
		const commit = (value) => open.commit().then(() => value);
		if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
			return result.then(commit, (error) => {
				open.abort();
				throw error;
			});
		}
		return commit(result);
	}
	const transactionIn = (source, what) => {
		const open = (source?.getContext?.() ?? source)?.transaction ?? (source instanceof TransactionSet ? source : undefined);
		if (!open) throw new Error(`No active transaction is available to ${what}`);
		return open;
	};
	transaction.commit = (source) => transactionIn(source, 'commit').commit();
	transaction.abort = (source) => transactionIn(source, 'abort').abort();

	/**
	 * Writes of updatable records made outside a transaction that have not settled:
	 * a request's answer waits for them (see `settled`), as Harper's commits them
	 * with the request's transaction. The runtime's writes are not told apart by
	 * request, so one that fails is logged, not made another request's failure;
	 * code that awaits `save()` (or the write) sees it.
	 */
	const unsettledWrites = new Set();
	/** How many there are (a number is cheaper to ask on every request than a Set). */
	let unsettledCount = 0;

	/** Keeps `promise` in `unsettledWrites` until it settles, logging its failure. */
	function tracked(promise) {
		const forget = () => {
			unsettledWrites.delete(settledWrite);
			unsettledCount = unsettledWrites.size;
		};
		const settledWrite = promise.then(forget, (error) => {
			forget();
			native.log('error', `a write of an updatable record failed: ${error?.message ?? error}`);
		});
		unsettledWrites.add(settledWrite);
		unsettledCount = unsettledWrites.size;
		return promise;
	}

	/** A number `addTo` may add (a BigInt as the number it is). */
	function increment(value) {
		if (typeof value === 'number') return value;
		if (typeof value === 'bigint') return Number(value);
		throw new TypeError('Can not add a non-numeric value');
	}

	/**
	 * Harper's Updatable: the record as read, with what was changed since, whose
	 * changes (`set`, `addTo`, `subtractFrom`, or assigning a property) are written
	 * as patches. `addTo` is a CRDT increment (`{__op__: 'add'}`), so concurrent
	 * ones all count. In an open transaction the changes commit with it (one patch,
	 * read at commit); otherwise each is written at once.
	 */
	function makeUpdatable(record, id, patch) {
		const view = Object.assign({}, record);
		const pending = [];
		const change = (name, value, delta) => {
			view[name] = value;
			const written = patch({ [name]: delta });
			if (written) pending.push(written);
		};
		const methods = {
			getId: () => id,
			getProperty: (name) => view[name],
			set(name, value) {
				change(name, value, value);
			},
			addTo(name, value) {
				const n = increment(value);
				change(name, (+view[name] || 0) + n, { __op__: 'add', value: n });
			},
			subtractFrom(name, value) {
				const n = increment(value);
				change(name, (+view[name] || 0) - n, { __op__: 'add', value: -n });
			},
			/** Settles once every change written so far has committed. */
			save: () => Promise.all(pending.splice(0)).then(() => undefined),
		};
		return new Proxy(view, {
			get: (target, key) => (Object.hasOwn(methods, key) ? methods[key] : target[key]),
			set(target, key, value) {
				if (typeof key !== 'string') target[key] = value;
				else methods.set(key, value);
				return true;
			},
			deleteProperty(target, key) {
				if (typeof key === 'string') methods.set(key, null);
				delete target[key];
				return true;
			},
		});
	}

	/** What `select` picks of `record`: one property's value (a name), or an object of those named. */
	function selected(record, select) {
		if (record === undefined || record === null) return record;
		if (typeof select === 'string') return record[select];
		if (!Array.isArray(select)) return record;
		const picked = {};
		for (const entry of select) {
			const name = typeof entry === 'string' ? entry : entry?.name;
			if (typeof name === 'string' && name in record) picked[name] = record[name];
		}
		return Object.freeze(picked);
	}

	/** Merges change `delta` into the changes `into` holds for a transaction's one patch. */
	function mergeChange(into, delta) {
		for (const [name, value] of Object.entries(delta)) {
			const before = into[name];
			const adds = value?.__op__ === 'add';
			if (adds && before?.__op__ === 'add') into[name] = { __op__: 'add', value: before.value + value.value };
			else if (adds && (typeof before === 'number' || before === null)) into[name] = (before ?? 0) + value.value;
			else into[name] = value;
		}
	}

	/** A class for a table, with Harper's table API over Lyre's. */
	function makeTable(info) {
		const { database, table, primaryKey } = info;
		info.computed = info.attributes.filter((attribute) => attribute.computed);
		/** Writes now, or queues the write in the resource's open transaction. */
		const write = (resource, kind, handle, first, second) => {
			const open = transactionOf(resource);
			if (!open) return native[kind](database, table, first, second ?? null, handle);
			open.add(kind, database, table, first, second, handle);
			const id = kind === 'create' ? first?.[primaryKey] : undefined;
			return Promise.resolve(kind === 'delete' ? true : id);
		};
		/** Whether `sourcedFrom` made this table a cache of a source (one class per table). */
		let sourced = false;
		/**
		 * Record `id` as `handle` may read it, frozen (or its promise, for a table with
		 * a source). Lyre keeps a flat one's stored bytes (`native.get`'s last argument):
		 * a handler answering with this very record is answered from them. `native.get`
		 * gives it frozen already unless it computes attributes (then it is extensible).
		 */
		const readRecord = (id, handle) => {
			if (!sourced) {
				const record = native.get(database, table, id, handle, true);
				if (record === undefined || !Object.isExtensible(record)) return record;
				return Object.freeze(withComputed(info, record));
			}
			return readThrough(info, id, handle).then((record) => (record === undefined ? undefined : Object.freeze(record)));
		};
		const TableClass = class extends Resource {
			static get primaryKey() {
				return primaryKey;
			}
			static get databaseName() {
				return database;
			}
			static get tableName() {
				return table;
			}
			static get attributes() {
				return info.attributes;
			}
			/** Reads this instance's record into it, as `handle` may read it (Harper's instance-loading mode). */
			async load(handle) {
				const record = await readThrough(info, this.getId(), handle);
				for (const key of Object.keys(this)) delete this[key];
				this[LOADED] = record !== undefined;
				if (record !== undefined) withComputed(info, Object.assign(this, record));
			}
			doesExist() {
				return this[LOADED] !== false;
			}
			get(target) {
				const legacy = this.constructor.loadAsInstance !== false;
				if (legacy && typeof target === 'string') return this[target];
				if (this.isCollection || target?.isCollection) return this.search(target);
				const id = this.getId();
				if (id === undefined) return native.describe(database, table, handleFor(this, target));
				// A query object's `select` (`get({id, select})`) picks from the record.
				const select = target && Object.hasOwn(target, 'select') ? target.select : undefined;
				if (legacy) return this[LOADED] ? (select === undefined ? this : selected(this, select)) : undefined;
				if (select !== undefined) {
					return guarded(this, 'allowRead', target, target, (handle) =>
						Promise.resolve(readRecord(id, handle)).then((record) => selected(record, select)),
					);
				}
				// The common case without guarded's closure: no hook of the class's own to ask.
				if (this.allowRead === TableClass.prototype.allowRead || !target?.checkPermission) {
					// A request's target carries its handle: handleFor's first case, inline.
					const handle = target?.checkPermission && target[CONTEXT_HANDLE] !== undefined ? target[CONTEXT_HANDLE] : handleFor(this, target);
					return readRecord(id, handle);
				}
				return guarded(this, 'allowRead', target, target, (handle) => readRecord(id, handle));
			}
			search(target) {
				const query = queryOf(target);
				const frozen = this.constructor.loadAsInstance === false;
				return guarded(this, 'allowRead', target, target, (handle) =>
					results(
						native.search(database, table, query, handle).map((record) => withComputed(info, record)),
						frozen,
					),
				);
			}
			put(first, second) {
				const legacy = this.constructor.loadAsInstance !== false;
				const [target, data] = legacy ? [second, first] : [first, second];
				return guarded(this, 'allowUpdate', data, target, (handle) => write(this, 'put', handle, this.getId(), data));
			}
			patch(first, second) {
				const legacy = this.constructor.loadAsInstance !== false;
				const [target, data] = legacy ? [second, first] : [first, second];
				return guarded(this, 'allowUpdate', data, target, (handle) => write(this, 'patch', handle, this.getId(), data));
			}
			/**
			 * Harper's `update(target, updates?)`: an Updatable of the record (see
			 * `makeUpdatable`), with `updates` written first.
			 */
			update(first, second) {
				const legacy = this.constructor.loadAsInstance !== false;
				const [target, data] = legacy ? [second, first] : [first, second];
				const id = legacy || target === undefined || target === null || typeof target === 'object' ? this.getId() : target;
				const handle = handleFor(this, target);
				const open = transactionOf(this);
				let patch;
				if (open) {
					// One patch, queued with the first change (none: nothing written) and
					// read at commit; a change after the commit throws.
					const changes = {};
					let queued = false;
					patch = (delta) => {
						if (!queued) open.add('patch', database, table, id, changes, handle);
						queued = true;
						mergeChange(changes, delta);
					};
				} else {
					patch = (delta) => tracked(native.patch(database, table, id, delta, handle));
				}
				// `updates` are written as one patch, before the updatable is answered.
				const updates = data && typeof data === 'object' ? { ...data } : undefined;
				const written = updates && Object.keys(updates).length > 0 ? patch(updates) : undefined;
				return Promise.all([readRecord(id, handle), written]).then(([record]) =>
					makeUpdatable({ ...(record ?? { [primaryKey]: id }), ...updates }, id, patch),
				);
			}
			delete(target) {
				return guarded(this, 'allowDelete', target, target, async (handle) => {
					if (this.isCollection || target?.isCollection) {
						const matches = await this.search(target);
						for (const record of matches) await write(this, 'delete', handle, record[primaryKey]);
						return true;
					}
					await write(this, 'delete', handle, this.getId());
					return true;
				});
			}
			/** Creates a record (a new id unless it names one); the record, with its id, as Harper's. */
			create(first, second) {
				const legacy = this.constructor.loadAsInstance !== false;
				const [target, data] = legacy && !(first instanceof RequestTarget) ? [second, first] : [first, second];
				const record = data ?? {};
				return guarded(this, 'allowCreate', record, target, (handle) =>
					Promise.resolve(write(this, 'create', handle, record)).then((id) => {
						if (id === undefined || record[primaryKey] === id) return record;
						if (Object.isExtensible(record)) {
							record[primaryKey] = id;
							return record;
						}
						return { ...record, [primaryKey]: id };
					}),
				);
			}
			allowRead(user, target, context) {
				return native.allowed(database, table, 'read', handleOfUser(context));
			}
			allowUpdate(user, data, context) {
				return native.allowed(database, table, 'update', handleOfUser(context));
			}
			allowCreate(user, data, context) {
				return native.allowed(database, table, 'insert', handleOfUser(context));
			}
			allowDelete(user, target, context) {
				return native.allowed(database, table, 'delete', handleOfUser(context));
			}
			/** Records matching a query object, or REST's query string (`name=x&limit(5)`). */
			static search(query, context) {
				// An array is the conditions (Harper's `search([{attribute, value}])`).
				const asked = Array.isArray(query) ? { conditions: query } : query;
				return new this(null, context).search(typeof asked === 'string' ? asked : targetOf(asked ?? null));
			}
			static create(record, context) {
				return new this(null, context).create(targetOf(null), record);
			}
			static update(id, updates, context) {
				return invoke(this, 'update', id, updates, context);
			}
			/** How many records the table holds (`{recordCount}`; Lyre's count is exact). */
			static getRecordCount() {
				return Promise.resolve({ recordCount: native.describe(database, table, UNCHECKED).recordCount });
			}
			/** Computes attribute `name` (declared `@computed`) with `resolver(record)`, as Harper's. */
			static setComputedAttribute(name, resolver) {
				const attribute = info.attributes.find((a) => a.name === name);
				if (!attribute) {
					console.error(`The attribute "${name}" does not exist in the table "${table}"`);
					return;
				}
				if (!attribute.computed) {
					console.error(`The attribute "${name}" is not defined as computed in the table "${table}"`);
					return;
				}
				if (typeof resolver !== 'function') throw new TypeError('setComputedAttribute takes a function');
				const key = `${database}.${table}`;
				if (!computedResolvers.has(key)) computedResolvers.set(key, new Map());
				computedResolvers.get(key).set(name, resolver);
				registeredComputed.push([database, table, name]);
			}
			/** Makes this table a cache of `Source` (a class whose `get` answers one record). */
			static sourcedFrom(Source, options = {}) {
				if (typeof Source?.get !== 'function') throw new TypeError('sourcedFrom takes a class with a get method');
				const expiration = Number.isFinite(options.expiration) ? options.expiration : null;
				const declared = { Source, expiration, name: Source.name || 'source' };
				sources.set(`${database}.${table}`, declared);
				sourced = true;
				// One entry per table, however often a script declares it.
				const at = declaredSources.findIndex((d) => d.database === database && d.table === table);
				if (at >= 0) declaredSources.splice(at, 1);
				declaredSources.push({ database, table, name: declared.name, expiration });
				return this;
			}
		};
		/**
		 * Runs `run` with the handle a call is made as. In the newer mode a class's own
		 * permission hook (`allowRead`, …) decides for a request's target first, as
		 * Harper's table methods ask it; the table's own hooks are the role's, which
		 * Lyre checks with the request's handle.
		 */
		function guarded(resource, hook, subject, target, run) {
			const own = resource[hook];
			if (resource.constructor.loadAsInstance !== false || !target?.checkPermission || own === TableClass.prototype[hook]) {
				return run(handleFor(resource, target));
			}
			const context = resource.getContext?.();
			const user = context?.user ?? null;
			return Promise.resolve(own.call(resource, user, subject, context)).then((allowed) => {
				if (!allowed) throw accessViolation(user);
				return run(UNCHECKED);
			});
		}
		Object.defineProperty(TableClass, 'name', { value: table });
		TableClass[TABLE] = { database, table, primaryKey, base: TableClass };
		TableClass[BUILT_IN] = true;
		return TableClass;
	}

	/** The handle a permission hook checks: the request's user; nobody without a request. */
	function handleOfUser(context) {
		return context?.[CONTEXT_HANDLE] ?? -1;
	}

	const databases = {};
	for (const info of native.tables()) {
		const tablesOf = (databases[info.database] ??= Object.create(null));
		tablesOf[info.table] = makeTable(info);
	}
	const tables = databases.data ?? Object.create(null);
	if (databases.system) Object.defineProperty(databases, 'system', { enumerable: false, value: databases.system });

	// ---- Logging ----
	const text = (args) =>
		args
			.map((a) => {
				if (typeof a === 'string') return a;
				if (a instanceof Error) return a.stack ? `${a.name}: ${a.message}\n${a.stack}` : `${a.name}: ${a.message}`;
				try {
					return JSON.stringify(a);
				} catch {
					return String(a);
				}
			})
			.join(' ');
	const logAt = (level) => (...args) => native.log(level, text(args));
	const logger = {
		notify: logAt('notify'),
		fatal: logAt('fatal'),
		error: logAt('error'),
		warn: logAt('warn'),
		info: logAt('info'),
		debug: logAt('debug'),
		trace: logAt('trace'),
		withTag: () => logger,
		loggerWithTag: () => logger,
	};
	const console = {
		log: logAt('info'),
		info: logAt('info'),
		warn: logAt('warn'),
		error: logAt('error'),
		debug: logAt('debug'),
		trace: logAt('trace'),
	};

	// ---- Exports and dispatch ----
	const resources = new Map();
	const HANDLERS = {
		get: ['get', 'allowRead', 'search'],
		put: ['put', 'allowUpdate', 'allowCreate', 'update'],
		patch: ['patch', 'allowUpdate', 'update'],
		post: ['post', 'allowCreate', 'create'],
		delete: ['delete', 'allowDelete'],
	};

	const isResource = (value) =>
		typeof value === 'function' && ('get' in value || 'put' in value || 'post' in value || 'delete' in value);

	/** The handlers a script's class defines itself, below Lyre's classes. */
	function overrides(Class) {
		const own = new Set();
		for (let c = Class; c && !Object.hasOwn(c, BUILT_IN); c = Object.getPrototypeOf(c)) {
			for (const name of Object.getOwnPropertyNames(c)) own.add(name);
			for (const name of Object.getOwnPropertyNames(c.prototype ?? {})) own.add(name);
		}
		return Object.keys(HANDLERS).filter((handler) => HANDLERS[handler].some((name) => own.has(name)));
	}

	/** Registers what a component's module exports; returns the resources found and the sources declared. */
	function register(component, namespace) {
		const found = [];
		const walk = (value, path, depth) => {
			if (depth > 8 || value === null || value === undefined) return;
			if (isResource(value)) found.push([path, value]);
			else if (typeof value === 'object') for (const name in value) walk(value[name], `${path}/${name}`, depth + 1);
		};
		for (const name in namespace) walk(namespace[name], name, 0);
		const exports = found.map(([path, Class]) => {
			resources.set(path, Class);
			const table = Class[TABLE];
			return {
				path,
				component,
				database: table?.database ?? null,
				table: table?.table ?? null,
				overrides: overrides(Class),
			};
		});
		const middleware = { first: registeredMiddleware.first > 0, last: registeredMiddleware.last > 0 };
		registeredMiddleware.first = registeredMiddleware.last = 0;
		return {
			exports,
			sources: declaredSources.splice(0),
			middleware,
			contentTypes: registeredTypes.splice(0),
			computed: registeredComputed.splice(0),
		};
	}

	// What a request's context fetched or made when first asked, by context (or by its
	// handle's slot): not private fields (a context never asked pays nothing for them),
	// and not properties (a script may freeze or copy its context).
	const contextUsers = new WeakMap();
	const contextRequestHeaders = new WeakMap();
	/**
	 * What belongs to a request while it is answered, by its handle's slot (native.rs
	 * keeps its handles in a ring of as many): plain arrays, which QuickJS reads far
	 * cheaper than a `Map` or a `WeakMap`. A slot is the request's only while the
	 * handle kept beside it is the request's.
	 */
	const SLOTS = 1024;
	/** A handle's slot is `handle & SLOT_OF` (written inline: QuickJS calls are dear). */
	const SLOT_OF = SLOTS - 1;
	/** An array of `SLOTS` elements `fill`, made by pushing (so QuickJS keeps it a fast array). */
	const slots = (fill) => {
		const array = [];
		for (let i = 0; i < SLOTS; i++) array.push(fill);
		return array;
	};
	/** The headers a request's script set on its response, and whose they are. */
	const responseHeaders = slots(undefined);
	const responseHeadersOf = slots(-1);

	/** What `context` keeps in `kept`, made by `make` when first asked. */
	function keptFor(kept, context, make) {
		let value = kept.get(context);
		if (value === undefined) {
			value = make();
			kept.set(context, value);
		}
		return value;
	}

	/** A request's context, as its handler's `getContext()` gives it. */
	function requestContext(method, pathname, search, handle, data) {
		// A literal with its prototype: in QuickJS cheaper than a constructor's property adds.
		return {
			__proto__: RequestContext.prototype,
			[CONTEXT_HANDLE]: handle,
			method,
			pathname,
			url: search ? `${pathname}?${search}` : pathname,
			data,
			authorize: true,
		};
	}

	/**
	 * The request as a resource's context (`requestContext` makes one; Harper passes the
	 * request itself); its user and headers are read when asked for.
	 */
	class RequestContext {
		get user() {
			return keptFor(contextUsers, this, () => native.user(this[CONTEXT_HANDLE]));
		}
		set user(user) {
			contextUsers.set(this, user);
		}
		get headers() {
			return keptFor(contextRequestHeaders, this, () => {
				const map = new Map(native.headers(this[CONTEXT_HANDLE]));
				return {
					get: (name) => map.get(String(name).toLowerCase()) ?? null,
					has: (name) => map.has(String(name).toLowerCase()),
					[Symbol.iterator]: () => map.entries(),
				};
			});
		}
		/** The client's address. */
		get ip() {
			return native.client(this[CONTEXT_HANDLE])?.[0] || undefined;
		}
		/** `https` for a request over TLS, else `http`. */
		get protocol() {
			return native.client(this[CONTEXT_HANDLE])?.[1];
		}
		/** The `Host` the client asked for (with its port), as Harper's `host` and `hostname`. */
		get host() {
			return this.headers.get('host') ?? undefined;
		}
		get hostname() {
			return this.host;
		}
		get absoluteURL() {
			return `${this.protocol}://${this.host}${this.url}`;
		}
		get responseHeaders() {
			const handle = this[CONTEXT_HANDLE];
			const slot = handle & SLOT_OF;
			if (responseHeadersOf[slot] !== handle) {
				responseHeaders[slot] = new Headers();
				responseHeadersOf[slot] = handle;
			}
			return responseHeaders[slot];
		}
	}

	/** The headers a script set on the response in `slot`, as pairs, let go. */
	function takeResponsePairs(slot) {
		responseHeadersOf[slot] = -1;
		const headers = responseHeaders[slot];
		responseHeaders[slot] = undefined;
		return headers.pairs();
	}

	function pairsOf(headers) {
		if (!headers) return [];
		if (typeof headers.pairs === 'function') return headers.pairs();
		if (typeof headers.entries === 'function') return [...headers.entries()];
		return Object.entries(headers);
	}

	/** A handler's result as Lyre answers it: `[status, headers, value, body]` (headers `undefined` when none). */
	function reply(result, method, context) {
		const handle = context[CONTEXT_HANDLE];
		const headers = responseHeadersOf[handle & SLOT_OF] === handle ? takeResponsePairs(handle & SLOT_OF) : undefined;
		if (result === undefined || result === null) {
			return [method === 'GET' || method === 'HEAD' ? 404 : 204, headers];
		}
		if (typeof result === 'object' && result.status > 0 && result.headers) {
			const all = [...(headers ?? []), ...pairsOf(result.headers).map(([n, v]) => [String(n), String(v)])];
			if (result.data !== undefined) return [result.status, all, result.data];
			return [result.status, all, undefined, result.body];
		}
		if (typeof result === 'object' && typeof result.contentType === 'string' && 'data' in result && !(result instanceof Resource)) {
			return [200, [...(headers ?? []), ['content-type', result.contentType]], undefined, result.data];
		}
		if (context.createdResource) {
			return [201, [...(headers ?? []), ['location', String(context.newLocation)]], result];
		}
		// Bytes are sent as they are; a Map, a Set or another iterable as the array
		// of what it yields (as Harper streams one).
		if (result instanceof ArrayBuffer || ArrayBuffer.isView(result)) {
			return [200, headers, undefined, result instanceof Uint8Array ? result : new Uint8Array(result.buffer ?? result, result.byteOffset ?? 0, result.byteLength)];
		}
		if (typeof result === 'object' && !Array.isArray(result) && typeof result[Symbol.iterator] === 'function') {
			return [200, headers, [...result]];
		}
		return [200, headers, result];
	}

	/** A thrown error as Lyre answers it: `[status, headers, , , message, stated, stack]`. */
	function failure(error, method, context) {
		const stated = error !== null && typeof error === 'object' && Number.isInteger(error.statusCode);
		const status = stated && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
		// Lyre's own refusals (a table call's 401 or 403, a 4xx) read as Harper's.
		const refused = stated && (error.statusCode === 401 || error.statusCode === 403) && error.constructor === Error;
		const ours = stated && error.__lyre === true && error.statusCode < 500;
		const name = refused ? 'AccessViolation' : ours ? 'ClientError' : (error?.constructor?.name ?? 'Error');
		const text = refused ? (error.statusCode === 401 ? 'Must login' : 'Unauthorized access to resource') : error?.message;
		let message = error !== null && typeof error === 'object' && typeof text === 'string' ? `${name}: ${text}` : String(error);
		// Headers the handler set before it threw are kept, as Harper keeps them.
		const handle = context?.[CONTEXT_HANDLE];
		const set = handle !== undefined && responseHeadersOf[handle & SLOT_OF] === handle ? takeResponsePairs(handle & SLOT_OF) : [];
		const headers = [...set];
		if (status === 405 && Array.isArray(error.allow)) {
			message += ` to handle HTTP method ${method}`;
			headers.push(['allow', ['GET', 'POST', 'TRACE', 'HEAD', 'OPTIONS', ...error.allow.filter((m) => m !== 'get' && m !== 'post').map((m) => m.toUpperCase())].join(', ')]);
		}
		return [status, headers, undefined, undefined, message, stated, error?.stack ?? ''];
	}

	const METHODS = { GET: 'get', HEAD: 'get', PUT: 'put', PATCH: 'patch', POST: 'post', DELETE: 'delete' };

	/**
	 * The contexts of requests whose handler answered with a promise, by their handle's
	 * slot, until Lyre reads the promise's outcome and asks for the answer (`settled`).
	 * Lyre reads a promise settled within its call at once: no async frame and no job
	 * wait for it.
	 */
	const waiting = slots(undefined);

	/** A handler's settled promise's outcome (`failed`: rejected with `value`) as Lyre answers it. */
	function settled(handle, value, failed) {
		const slot = handle & SLOT_OF;
		const context = waiting[slot];
		if (context === undefined || context[CONTEXT_HANDLE] !== handle) {
			return failure(new ServerError('the request was answered already'), 'GET');
		}
		if (!failed && isAsyncIterable(value)) {
			// An async generator a handler's promise resolved to: the array of what it yields.
			return collected(value).then(
				(values) => settled(handle, values, false),
				(error) => settled(handle, error, true),
			);
		}
		if (unsettledCount > 0 && !failed) {
			// Answered once the updatable records' writes have settled (a promise of the answer).
			return Promise.all([...unsettledWrites]).then(() => settled(handle, value, false));
		}
		waiting[slot] = undefined;
		if (failed) return failure(value, context.method, context);
		try {
			return reply(value, context.method, context);
		} catch (error) {
			return failure(error, context.method, context);
		}
	}

	/**
	 * Answers one REST request with the resource its path names (see worker.rs
	 * `dispatch_args`): the answer, or the handler's promise when it gives one (a
	 * promise of another thenable's outcome), whose answer Lyre asks `settled` for
	 * once it has settled.
	 */
	function dispatch(path, httpMethod, id, collection, search, pathname, handle, data) {
		const context = requestContext(httpMethod, pathname, search, handle, data);
		try {
			const Class = resources.get(path);
			if (!Class) throw new ClientError(`no resource at ${path}`, 404);
			// What `new RequestTarget(search)` and five assignments make, as one literal:
			// in QuickJS half their cost.
			const target = {
				__proto__: RequestTarget.prototype,
				[SEARCH_PAIRS]: search,
				search,
				id: collection ? null : id,
				pathname: pathBelow(path, pathname),
				checkPermission: true,
				[CONTEXT_HANDLE]: handle,
			};
			if (collection) target.isCollection = true;
			const method = METHODS[httpMethod];
			if (!method) throw new ServerError(`Method ${httpMethod} is not recognized`, 501);
			const takesData = method !== 'get' && method !== 'delete';
			// A static method the class does not define itself runs without its promise.
			const result =
				Class[method] === Resource[method]
					? invokeNow(Class, method, target, takesData ? data : undefined, context)
					: takesData
						? Class[method](target, data, context)
						: Class[method](target, context);
			if (isAsyncIterable(result)) {
				waiting[handle & SLOT_OF] = context;
				return collected(result);
			}
			if ((result !== null && typeof result === 'object' && typeof result.then === 'function') || unsettledCount > 0) {
				// A promise, or an answer that waits for writes (see `settled`).
				waiting[handle & SLOT_OF] = context;
				return result instanceof Promise ? result : Promise.resolve(result);
			}
			return reply(result, httpMethod, context);
		} catch (error) {
			return failure(error, httpMethod, context);
		}
	}

	/**
	 * Whether `value` is an async iterable that is neither an array (a search's
	 * results are both) nor a promise: an async generator's result.
	 */
	function isAsyncIterable(value) {
		return (
			value !== null &&
			typeof value === 'object' &&
			!Array.isArray(value) &&
			typeof value[Symbol.asyncIterator] === 'function' &&
			typeof value.then !== 'function'
		);
	}

	/** What an async iterable yields, as one array (Harper streams it as one; the runtime's memory and time limits bound it). */
	async function collected(iterable) {
		const values = [];
		for await (const value of iterable) values.push(value);
		return values;
	}

	// ---- HTTP middleware (`server.http`) ----
	/** Listeners by where they run: `first` before everything of Lyre's, `last` for what nothing answered. */
	const middleware = { first: [], last: [] };
	/** How many each component's modules registered, since the last registration. */
	const registeredMiddleware = { first: 0, last: 0 };

	/** A request as middleware sees it (Harper's: `url` is the path and query). */
	class HttpRequest {
		#handle;
		#headers;
		#user;
		#body;
		constructor(method, url, body, ip, handle) {
			this.#handle = handle;
			this.#body = body;
			this.method = method;
			this.url = url;
			const query = url.indexOf('?');
			this.pathname = query < 0 ? url : url.slice(0, query);
			this.search = query < 0 ? '' : url.slice(query);
			this.ip = ip;
			this[CONTEXT_HANDLE] = handle;
		}
		get headers() {
			return (this.#headers ??= new Headers(native.headers(this.#handle)));
		}
		set headers(headers) {
			this.#headers = headers instanceof Headers ? headers : new Headers(headers);
		}
		get host() {
			return this.headers.get('host');
		}
		get user() {
			if (this.#user === undefined) this.#user = native.user(this.#handle);
			return this.#user;
		}
		set user(user) {
			this.#user = user;
		}
		/** The body's bytes (a `Uint8Array`), or `undefined`; may be replaced before `next`. */
		get body() {
			return this.#body ?? undefined;
		}
		set body(body) {
			this.#body = body;
		}
		async text() {
			return this.#body ? native.utf8Decode(this.#body, false) : '';
		}
		async json() {
			return JSON.parse(await this.text());
		}
	}

	/** What `next` answers as a `Response` (Harper's has `status`, `headers` and `body`). */
	function nextResponse([status, headers, body]) {
		const bodyless = status === 204 || status === 304 || status < 200;
		const response = new Response(bodyless ? null : body, { status: Math.max(status, 200), headers });
		if (status < 200) Object.defineProperty(response, 'status', { value: status });
		return response;
	}

	/** A listener's answer as the layer before it gets it from `next`: headers it can set. */
	function asResponse(answer) {
		if (answer === undefined || answer === null) return new Response('Not found', { status: 404 });
		if (typeof answer === 'object' && !(answer.headers instanceof Headers)) answer.headers = new Headers(answer.headers ?? {});
		return answer;
	}

	/**
	 * Runs the middleware of `phase` on one request (see worker.rs `serve_http`):
	 * each listener gets the request and the next layer; the innermost layer is Lyre's.
	 */
	function serveHttp(phase, method, url, body, ip, handle) {
		const request = new HttpRequest(method, url, body, ip, handle);
		/** The listeners of `listeners` around `innermost`. */
		const around = (listeners, innermost) => {
			let chain = innermost;
			for (let i = listeners.length; i > 0; ) {
				const listener = listeners[--i];
				const next = chain;
				chain = (passed) => listener(passed ?? request, next);
			}
			return chain;
		};
		const lyre = (passed) => {
			const on = passed ?? request;
			const bytes = on.body ?? null;
			return native
				.httpNext(handle, phase, String(on.method ?? method), String(on.url ?? url), on.headers.pairs(), bytes)
				.then((answer) => {
					// Nothing of Lyre's answered: the last-phase listeners may, in this same call.
					if (phase === 'first' && answer[3] && middleware.last.length) {
						return Promise.resolve(around(middleware.last, () => nextResponse(answer))(on)).then(asResponse);
					}
					return nextResponse(answer);
				});
		};
		const chain = around(middleware[phase], lyre);
		const context = requestContext(method, request.pathname, request.search.slice(1), handle, undefined);
		try {
			const result = chain(request);
			const answer = (settled) => (settled === undefined || settled === null ? reply({ status: 404, headers: [], body: 'Not found' }, method, context) : reply(settled, method, context));
			if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
				return result.then(answer, (error) => failure(error, method));
			}
			return answer(result);
		} catch (error) {
			return failure(error, method);
		}
	}

	// ---- Content types (`contentTypes`) ----
	/** Types registered since the last component's registration: `[type, serializes, deserializes]`. */
	const registeredTypes = [];
	/**
	 * Harper's `contentTypes`: a Map from media type to `{serialize, deserialize, q}`.
	 * A type a script sets is offered by REST: a response the client's `Accept`
	 * prefers in it is serialized by it, a request body of its `Content-Type`
	 * deserialized by it.
	 */
	class ContentTypes extends Map {
		set(type, handler) {
			super.set(type, handler);
			registeredTypes.push([
				String(type),
				typeof handler?.serialize === 'function',
				typeof handler?.deserialize === 'function',
			]);
			return this;
		}
	}
	const contentTypes = new ContentTypes();
	Map.prototype.set.call(contentTypes, 'application/json', {
		serialize: (data) => JSON.stringify(data),
		deserialize: (bytes) => JSON.parse(native.utf8Decode(bytes, false)),
		q: 0.8,
	});
	/** A conversion REST asks of a registered type (worker.rs `convert`). */
	function convertContent(kind, type, payload) {
		const handler = contentTypes.get(type) ?? [...contentTypes].find(([name]) => name.toLowerCase() === type)?.[1];
		if (typeof handler?.[kind] !== 'function') throw new ServerError(`the content type ${type} cannot ${kind}`, 500);
		// A body to deserialize is a Buffer, as Harper hands it over.
		return handler[kind](kind === 'deserialize' ? Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength) : payload);
	}

	/** Harper's `server`: HTTP middleware registration. */
	const server = {
		contentTypes,
		/** Adds `listener(request, next)` to the HTTP port's handling (`{runFirst}` puts it before Lyre's own). */
		http(listener, options = {}) {
			if (typeof listener !== 'function') throw new TypeError('server.http takes a function (request, next)');
			if (options?.port !== undefined || options?.securePort !== undefined) {
				console.warn('server.http: Lyre serves middleware on the HTTP port only; the port options are left out');
			}
			const phase = options?.runFirst ? 'first' : 'last';
			if (phase === 'first') middleware.first.unshift(listener);
			else middleware.last.push(listener);
			registeredMiddleware[phase]++;
		},
	};

	// ---- CommonJS (packages in node_modules that Node would run as CommonJS) ----
	const commonjs = new Map();
	/** Node's `require` of the file at `path` (canonical, inside a component). */
	function requireFile(path) {
		const cached = commonjs.get(path);
		if (cached) return cached.exports;
		const source = native.readModule(path);
		const module = { exports: {}, id: path, filename: path, loaded: false, children: [] };
		commonjs.set(path, module);
		if (path.endsWith('.json')) {
			module.exports = JSON.parse(source);
		} else {
			const dirname = path.slice(0, path.lastIndexOf('/'));
			const require = (name) => {
				if (name === 'harperdb' || name === 'harper') return harper;
				const bare = String(name).replace(/^node:/, '');
				if (Object.hasOwn(globalThis.__lyre_node, bare)) return globalThis.__lyre_node[bare];
				return requireFile(native.resolveRequire(path, String(name)));
			};
			require.resolve = (name) => native.resolveRequire(path, String(name));
			require.cache = {};
			const wrapped = (0, eval)(`(function (exports, require, module, __filename, __dirname) {${source}\n})`);
			wrapped.call(module.exports, module.exports, require, module, path, dirname);
		}
		module.loaded = true;
		return module.exports;
	}

	const hidden = (value) => ({ value, enumerable: false, writable: false, configurable: false });
	Object.defineProperties(globalThis, {
		__lyre_dispatch: hidden(dispatch),
		__lyre_settled: hidden(settled),
		__lyre_http: hidden(serveHttp),
		__lyre_content: hidden(convertContent),
		__lyre_register: hidden(register),
		__lyre_source: hidden(answerSource),
		__lyre_require: hidden(requireFile),
	});
	// The part of Node's `process` packages look at (`process.env.NODE_ENV`, …).
	globalThis.process ??= {
		env: native.environment(),
		platform: 'linux',
		version: '',
		versions: {},
		argv: [],
		cwd: () => '/',
		nextTick: (callback, ...args) => queueMicrotask(() => callback(...args)),
	};
	/** Harper's API: the globals, and what `import … from 'harperdb'` (`modules.rs`) and `require('harperdb')` give. */
	const harper = {
		Resource,
		tables,
		databases,
		logger,
		server,
		transaction,
		contentTypes,
		RequestTarget,
		ClientError,
		ServerError,
	};
	Object.assign(globalThis, harper, { console });
	Object.defineProperty(globalThis, '__lyre_harper', hidden(harper));
});
