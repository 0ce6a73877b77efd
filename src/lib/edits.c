/* edits.c - the edit distance of a typo (edits.h): words are short, so a table on the stack. */
#include "edits.h"

#include <string.h>

size_t edits_between(const char *a, size_t al, const char *b, size_t max)
{
	size_t bl = strlen(b);
	if (al > 32 || bl > 32 || (al > bl ? al - bl : bl - al) > max)
		return max + 1;
	size_t d[33][33];
	for (size_t i = 0; i <= al; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= bl; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= al; i++)
		for (size_t j = 1; j <= bl; j++) {
			size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[al][bl] <= max ? d[al][bl] : max + 1;
}
