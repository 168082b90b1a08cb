/**
 * The `metav1.Status` object the real API server answers every failure with, built the way
 * k8s.io/apimachinery/pkg/api/errors builds it (NewNotFound, NewAlreadyExists, NewInvalid, NewForbidden,
 * NewTooManyRequests, NewResourceExpired, NewInternalError, NewServiceUnavailable, NewTimeoutError), so
 * the messages and reasons match what a client sees from a cluster.
 */
export interface StatusCause {
  reason?: string;
  message?: string;
  field?: string;
}

export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  uid?: string;
  causes?: StatusCause[];
  retryAfterSeconds?: number;
}

export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure' | 'Success';
  message: string;
  reason: string;
  details?: StatusDetails;
  code: number;
}

/** A Status with the HTTP headers that go with it (`Retry-After` for 429, 503 and 504). */
export class StatusError extends Error {
  constructor(readonly status: Status) {
    super(status.message);
  }

  get code(): number {
    return this.status.code;
  }

  headers(): Record<string, string> {
    const after = this.status.details?.retryAfterSeconds;
    return after !== undefined ? { 'Retry-After': String(after) } : {};
  }
}

function failure(code: number, reason: string, message: string, details?: StatusDetails): StatusError {
  const status: Status = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
  if (details !== undefined) status.details = details;
  return new StatusError(status);
}

/** The reason the real server gives each code when nothing more specific applies. */
export function reasonForCode(code: number): string {
  switch (code) {
    case 400:
      return 'BadRequest';
    case 401:
      return 'Unauthorized';
    case 403:
      return 'Forbidden';
    case 404:
      return 'NotFound';
    case 405:
      return 'MethodNotAllowed';
    case 409:
      return 'Conflict';
    case 410:
      return 'Expired';
    case 422:
      return 'Invalid';
    case 429:
      return 'TooManyRequests';
    case 500:
      return 'InternalError';
    case 503:
      return 'ServiceUnavailable';
    case 504:
      return 'Timeout';
    default:
      return 'Unknown';
  }
}

/** Any code with a given or the default message: the shape of an injected failure. */
export function statusFor(code: number, message?: string, details?: StatusDetails, reason?: string): StatusError {
  const r = reason ?? reasonForCode(code);
  switch (r) {
    case 'TooManyRequests':
      return failure(code, r, message ?? 'Too many requests, please try again later.', details);
    case 'InternalError':
      return failure(
        code,
        r,
        `Internal error occurred: ${message ?? 'injected failure'}`,
        details ?? { causes: [{ message: message ?? 'injected failure' }] },
      );
    case 'ServiceUnavailable':
      return failure(code, r, message ?? 'the server is currently unable to handle the request', details);
    default:
      return failure(code, r, message ?? r, details);
  }
}

export function notFound(resource: string, name: string): StatusError {
  return failure(404, 'NotFound', `${resource} "${name}" not found`, { name, kind: resource });
}

export function alreadyExists(resource: string, name: string): StatusError {
  return failure(409, 'AlreadyExists', `${resource} "${name}" already exists`, { name, kind: resource });
}

/** A field error as apimachinery's field.Error prints it: `spec.containers[0].image: Required value`. */
export interface FieldError {
  type:
    | 'FieldValueRequired'
    | 'FieldValueInvalid'
    | 'FieldValueNotSupported'
    | 'FieldValueDuplicate'
    | 'FieldValueTooLong'
    | 'FieldValueForbidden';
  field: string;
  /** The cause's message: `Required value`, `Invalid value: "x": detail`. */
  message: string;
}

export function required(field: string, detail?: string): FieldError {
  return { type: 'FieldValueRequired', field, message: detail ? `Required value: ${detail}` : 'Required value' };
}

export function invalid(field: string, value: unknown, detail: string): FieldError {
  return { type: 'FieldValueInvalid', field, message: `Invalid value: ${JSON.stringify(value)}: ${detail}` };
}

export function notSupported(field: string, value: unknown, supported: string[]): FieldError {
  return {
    type: 'FieldValueNotSupported',
    field,
    message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => `"${s}"`).join(', ')}`,
  };
}

export function duplicate(field: string, value: unknown): FieldError {
  return { type: 'FieldValueDuplicate', field, message: `Duplicate value: ${JSON.stringify(value)}` };
}

/** NewInvalid: `Pod "x" is invalid: f: msg`, or `[f1: m1, f2: m2]` for several. */
export function invalidObject(kind: string, name: string, errors: FieldError[]): StatusError {
  const parts = errors.map((e) => `${e.field}: ${e.message}`);
  const joined = parts.length === 1 ? parts[0]! : `[${parts.join(', ')}]`;
  return failure(422, 'Invalid', `${kind} "${name}" is invalid: ${joined}`, {
    name,
    kind,
    causes: errors.map((e) => ({ reason: e.type, message: e.message, field: e.field })),
  });
}

export function badRequest(message: string): StatusError {
  return failure(400, 'BadRequest', message);
}

export function unauthorized(): StatusError {
  return failure(401, 'Unauthorized', 'Unauthorized');
}

/** NewForbidden: `pods "x" is forbidden: reason`, or `pods is forbidden: reason` without a name. */
export function forbidden(resource: string, name: string | undefined, reason: string): StatusError {
  const subject = name ? `${resource} "${name}"` : resource;
  const details: StatusDetails = { kind: resource };
  if (name) details.name = name;
  return failure(403, 'Forbidden', `${subject} is forbidden: ${reason}`, details);
}

export function expired(message: string): StatusError {
  return failure(410, 'Expired', message);
}

export function tooManyRequests(retryAfterSeconds: number, message?: string): StatusError {
  return failure(429, 'TooManyRequests', message ?? 'Too many requests, please try again later.', {
    retryAfterSeconds,
  });
}

export function methodNotAllowed(): StatusError {
  return failure(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
}

export function tooLargeResourceVersion(requested: number, current: number): StatusError {
  return failure(504, 'Timeout', `Timeout: Too large resource version: ${requested}, current: ${current}`, {
    causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
    retryAfterSeconds: 1,
  });
}
