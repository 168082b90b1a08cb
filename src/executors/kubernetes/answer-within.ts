/**
 * A request to the API server that has not answered in time: a hung connection must not hold a
 * drainer, or an attempt's end, for ever.
 */

/** The request's answer, or a rejection without a status code (a retry) when none comes in time. */
export async function answerWithin<T>(request: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from the API server within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([request, timeout]);
  } finally {
    clearTimeout(timer);
    request.catch(() => {});
  }
}
