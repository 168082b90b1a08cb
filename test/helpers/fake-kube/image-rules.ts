import { containerfileImage, type ImageFilesystem } from './image-filesystem.js';
import type { ImageRule } from './image-pull.js';

/**
 * What the fake knows of each image: the rules a test sets, then conventions (the Leoflow image is
 * the one editions/pro/Containerfile builds; a name containing `nonexistent` fails to pull).
 */
export class ImageRules {
  private readonly rules: Array<{ match: string | RegExp; rule: ImageRule }> = [];
  private leoflowImage: ImageFilesystem | undefined;

  /** A rule for images equal to (string) or matching (RegExp) `match`; the latest added wins. */
  add(match: string | RegExp, rule: ImageRule): void {
    this.rules.unshift({ match, rule });
  }

  /** The rule for an image: the latest the test added that matches, else by convention. */
  ruleFor(image: string): ImageRule {
    for (const { match, rule } of this.rules) {
      if (typeof match === 'string' ? match === image : match.test(image)) return rule;
    }
    // The Leoflow image (any registry, any tag) is the one editions/pro/Containerfile builds.
    if (/^(?:[^/]+\/)*leoflow(?:[:@]|$)/.test(image))
      return { filesystem: (this.leoflowImage ??= containerfileImage()) };
    if (image.includes('nonexistent')) {
      const repo = image.includes('/') ? image : `docker.io/library/${image}`;
      return {
        pullError:
          `rpc error: code = NotFound desc = failed to pull and unpack image "${repo}": ` +
          `failed to resolve reference "${repo}": ${repo}: not found`,
      };
    }
    return {};
  }
}
