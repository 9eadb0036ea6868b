"""A test-only CPU family whose source does not compile for any genome (a user's broken family)."""

from __future__ import annotations

from tests.families.faulty import FaultyFamily


class BrokenFamily(FaultyFamily):
    name = "broken"
    description = "out = 2a + b, from a source with a syntax error"

    def build_recipe(self, genome):
        recipe = super().build_recipe(genome)
        return type(recipe)(recipe.source + "\nthis is not C++;\n", recipe.source_name, recipe.compiler,
                            recipe.flags, recipe.output)


FAMILY = BrokenFamily()
