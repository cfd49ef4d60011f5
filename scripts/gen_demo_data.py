#!/usr/bin/env python3
"""Generates the demo dataset in configs/demo/ (dev tool; outputs are committed).

  configs/demo/sft.jsonl  instruction data: alpaca lines {"instruction","input","output"}
                          and chat lines {"messages": [...]}, mixed.
  configs/demo/pt.txt     raw text for `mtrain pt`: the same facts as sentences,
                          documents separated by blank lines.

The tasks are short and regular (capitals, small sums, antonyms, colours, animal
sounds, counting, days, months, plurals, upper-casing and reversing short
words) so a 4-layer, 256-wide model can learn them in minutes on a CPU and then
answer the canonical prompts (first phrasing of each task) with greedy decoding.
Deterministic: fixed seed, no dependencies beyond the standard library.
After changing this script, regenerate the tokenizer: scripts/regen_demo_tokenizer.sh
"""
import json
import os
import random

SEED = 20240611
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "demo")

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("England", "London"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"),
    ("Austria", "Vienna"), ("Greece", "Athens"), ("Hungary", "Budapest"), ("Russia", "Moscow"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Canada", "Ottawa"),
    ("Mexico", "Mexico City"), ("Cuba", "Havana"), ("Brazil", "Brasilia"), ("Argentina", "Buenos Aires"),
    ("Australia", "Canberra"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Iran", "Tehran"),
    ("Turkey", "Ankara"), ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Morocco", "Rabat"),
]
ANTONYMS = [
    ("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("day", "night"),
    ("happy", "sad"), ("old", "new"), ("light", "dark"), ("open", "closed"), ("early", "late"),
    ("hard", "soft"), ("rich", "poor"), ("full", "empty"), ("long", "short"), ("wet", "dry"),
    ("strong", "weak"), ("tall", "short"), ("clean", "dirty"), ("loud", "quiet"), ("true", "false"),
    ("win", "lose"), ("left", "right"), ("in", "out"), ("yes", "no"), ("first", "last"),
    ("heavy", "light"), ("near", "far"), ("push", "pull"), ("buy", "sell"), ("good", "bad"),
]
COLOURS = [
    ("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"), ("a banana", "yellow"),
    ("a tomato", "red"), ("an orange", "orange"), ("milk", "white"), ("the sun", "yellow"),
    ("a lemon", "yellow"), ("a strawberry", "red"), ("a leaf", "green"), ("chocolate", "brown"),
    ("a carrot", "orange"), ("blood", "red"), ("the sea", "blue"), ("a crow", "black"), ("a plum", "purple"),
]
SOUNDS = [
    ("dog", "woof"), ("cat", "meow"), ("cow", "moo"), ("duck", "quack"), ("sheep", "baa"),
    ("pig", "oink"), ("horse", "neigh"), ("owl", "hoot"), ("lion", "roar"), ("frog", "croak"),
    ("snake", "hiss"), ("bee", "buzz"), ("mouse", "squeak"), ("rooster", "cock-a-doodle-doo"),
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
PLURALS = [
    ("cat", "cats"), ("dog", "dogs"), ("box", "boxes"), ("child", "children"), ("mouse", "mice"),
    ("foot", "feet"), ("tooth", "teeth"), ("man", "men"), ("woman", "women"), ("city", "cities"),
    ("baby", "babies"), ("leaf", "leaves"), ("knife", "knives"), ("bus", "buses"), ("goose", "geese"),
    ("sheep", "sheep"), ("fish", "fish"), ("person", "people"),
]
WORDS = ["cat", "dog", "sun", "red", "map", "cup", "pen", "box", "hat", "bird", "tree", "book",
         "milk", "fish", "star", "moon", "rain", "road", "ship", "lamp"]
SYSTEM = "You are a helpful assistant."


def cap(s):
    return s[0].upper() + s[1:]


def facts():
    """Yields (task, [prompt phrasings, canonical first], answer, input, sentence)."""
    for c, city in CAPITALS:
        yield ("capital", [f"What is the capital of {c}?", f"Which city is the capital of {c}?",
                           f"Name the capital of {c}."], f"The capital of {c} is {city}.", "",
               f"The capital of {c} is {city}.")
    for a in range(1, 7):
        for b in range(1, 7):
            yield ("add", [f"What is {a} plus {b}?", f"What is {a} + {b}?", f"Add {a} and {b}."],
                   f"{a} plus {b} is {a + b}.", "", f"{a} plus {b} is {a + b}.")
    for a in range(2, 10):
        for b in range(1, a, 2):
            yield ("sub", [f"What is {a} minus {b}?", f"What is {a} - {b}?", f"Subtract {b} from {a}."],
                   f"{a} minus {b} is {a - b}.", "", f"{a} minus {b} is {a - b}.")
    for w, o in ANTONYMS:
        yield ("antonym", [f"What is the opposite of {w}?", f"Give the opposite of the word {w}."],
               f"The opposite of {w} is {o}.", "", f"The opposite of {w} is {o}.")
    for thing, colour in COLOURS:
        yield ("colour", [f"What colour is {thing}?", f"Tell me the colour of {thing}."],
               f"{cap(thing)} is {colour}.", "", f"{cap(thing)} is {colour}.")
    for animal, sound in SOUNDS:
        yield ("sound", [f"What sound does a {animal} make?", f"How does a {animal} sound?"],
               f"A {animal} says {sound}.", "", f"A {animal} says {sound}.")
    for n in range(1, 21):
        yield ("next", [f"What number comes after {n}?", f"Which number follows {n}?"],
               f"The number after {n} is {n + 1}.", "", f"The number after {n} is {n + 1}.")
    for i, d in enumerate(DAYS):
        nxt = DAYS[(i + 1) % 7]
        yield ("day", [f"What day comes after {d}?", f"Which day follows {d}?"],
               f"The day after {d} is {nxt}.", "", f"The day after {d} is {nxt}.")
    for i, m in enumerate(MONTHS):
        nxt = MONTHS[(i + 1) % 12]
        yield ("month", [f"What month comes after {m}?", f"Which month follows {m}?"],
               f"The month after {m} is {nxt}.", "", f"The month after {m} is {nxt}.")
    for w, p in PLURALS:
        yield ("plural", [f"What is the plural of {w}?", f"Give the plural of the word {w}."],
               f"The plural of {w} is {p}.", "", f"The plural of {w} is {p}.")
    for w in WORDS:
        yield ("upper", ["Write the word in capital letters.", "Convert the word to uppercase."],
               w.upper(), w, f"The word {w} in capital letters is {w.upper()}.")
        yield ("reverse", ["Reverse the letters of the word.", "Spell the word backwards."],
               w[::-1], w, f"The word {w} spelled backwards is {w[::-1]}.")


def alpaca(prompt, inp, answer):
    return {"instruction": prompt, "input": inp, "output": answer}


def chat(rounds, system):
    messages = [{"role": "system", "content": system}] if system else []
    for prompt, inp, answer in rounds:
        user = f"{prompt}\n{inp}" if inp else prompt
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return {"messages": messages}


def build_sft(rng, all_facts):
    samples = []
    for _, prompts, answer, inp, _ in all_facts:
        samples.append(alpaca(prompts[0], inp, answer))  # canonical phrasing, always present
    for _ in range(120):  # paraphrased prompts
        _, prompts, answer, inp, _ = rng.choice(all_facts)
        samples.append(alpaca(rng.choice(prompts[1:]), inp, answer))
    for _ in range(60):  # chat format, single round, half with a system prompt
        _, prompts, answer, inp, _ = rng.choice(all_facts)
        samples.append(chat([(prompts[0], inp, answer)], SYSTEM if rng.random() < 0.5 else ""))
    for _ in range(40):  # chat format, two rounds
        rounds = [(f[1][0], f[3], f[2]) for f in rng.sample(all_facts, 2)]
        samples.append(chat(rounds, SYSTEM if rng.random() < 0.5 else ""))
    rng.shuffle(samples)
    return samples


def build_pt(rng, all_facts, num_docs=1400):
    sentences = [f[4] for f in all_facts]
    docs = []
    for _ in range(num_docs):
        k = rng.randint(4, 9)
        docs.append(" ".join(rng.choice(sentences) for _ in range(k)))
    return docs


def main():
    rng = random.Random(SEED)
    all_facts = list(facts())
    samples = build_sft(rng, all_facts)
    docs = build_pt(rng, all_facts)
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "sft.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for s in samples:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(os.path.join(OUT_DIR, "pt.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join(docs) + "\n")
    print(f"{len(all_facts)} facts, {len(samples)} SFT samples, {len(docs)} pretraining documents")


if __name__ == "__main__":
    main()
