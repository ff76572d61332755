"""Generate the hard recall set: ``hard_tune_locomo.json`` and ``hard_test_locomo.json`` (LoCoMo layout).

Written for this project (names, events, wording); nothing is copied from a public benchmark. It is built to
fail the ways real conversations fail a retriever (issue 20), not to be easy to win:

- questions use other words than the facts (hypernyms and synonyms: "dog" for "beagle", "sibling" for
  "sister"), and first-person wording ("when did I ...") asked by the person themself;
- answers that need two to four facts from different sessions (a sister's name, then her wedding; the
  hobbies picked up over a year), and facts learned in the same session that never say the question's word
  ("when did she go camping" answered by "slept in a tent");
- time questions over dated facts: "when did ...", a named month, "last year", "last month", with the same
  kind of event at other times as the competitor;
- superseded facts (a job, a city) with "what changed" questions needing both;
- distractors about other people in the person's life sharing the question's words ("her neighbour adopted
  a terrier"), and generic hub facts that match everything ("has been working on a project recently");
- a small share of questions in German and Spanish (the embedded model is English-only; reported apart).

Categories follow LoCoMo: 1 several facts, 2 about time, 3 inference, 4 single fact; 6 is ours, "what
changed". ``tags`` marks cross-cutting kinds (``first-person``, ``de``, ``es``, and ``two facts`` for an
inference answered only by two facts together). Two splits with disjoint names and different seeds: tune on
one, report the other. Questions are asked on the day after the last session (the benchmark's "now").

    python -m benchmarks.data.make_hard       # rewrites both files
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from itertools import combinations
from pathlib import Path

HERE = Path(__file__).parent
SPLITS = {"tune": (20261202, 16), "test": (20261203, 16)}
LIFE_FACTS = (120, 200)  # everyday facts a person, besides the planned ones (real speakers: a few hundred)

FEMALE = ["Ilka", "Maren", "Tilde", "Roswitha", "Priyanka", "Quirina", "Saskia", "Theda", "Ulrike", "Vinka",
          "Wiebke", "Xenia", "Yolanda", "Zuzana", "Agathe", "Brigid", "Clodagh", "Dagny", "Eske", "Fiona",
          "Gunhild", "Hanne", "Ingrid", "Jolien", "Kirsi", "Liv", "Mette", "Nele", "Oona", "Pia", "Rona", "Sunniva"]
MALE = ["Aldo", "Bastian", "Casimir", "Dorian", "Emeric", "Florin", "Goran", "Hauke", "Ivo", "Jannik", "Kolja",
        "Lorenz", "Milo", "Nikolai", "Ossian", "Piet", "Radek", "Sander", "Thorben", "Ugo", "Valentin", "Wendelin",
        "Yorick", "Zeno", "Anders", "Birger", "Cyprian", "Detlef", "Egon", "Fabian", "Gero", "Hilmar"]
OTHERS = ["Tomas", "Ruth", "Keld", "Amira", "Jonas", "Lotte", "Benedek", "Carla", "Dmitri", "Esme", "Frode",
          "Greet", "Henrik", "Inez", "Alvar", "Bettina", "Cormac", "Delphine", "Eero", "Filippa", "Gustav", "Hortense",
          "Isak", "Jacinta", "Kalle", "Leonie", "Mathis", "Nanna", "Oskar", "Perpetua", "Rasmus", "Solveig", "Teodor",
          "Ursula", "Vilhelm", "Wanda", "Xaver", "Ylva", "Zoltan", "Aino", "Bertil", "Cecilie", "Dalibor", "Edda",
          "Ferdinand", "Gitte", "Hjalmar", "Ida", "Jarl", "Kaja", "Linus", "Magnhild", "Nils", "Oda", "Paulina",
          "Ragnar", "Sigrid", "Tuomas", "Unni", "Vidar"]
SIBLINGS = ["Hedda", "Noor", "Ottilie", "Greta", "Bjarne", "Anselm", "Liselotte", "Ambrose", "Clementine", "Darius",
            "Elodie", "Florian", "Genoveva", "Horatio", "Isolde", "Jasper", "Katinka", "Leopold", "Mirabel", "Nikodem",
            "Philippa", "Quentin", "Rosalind", "Severin", "Theodora", "Ulrich", "Valentina", "Wolfgang", "Zinnia",
            "Bartholomew", "Cordelia", "Evander"]
RELATIONS = ["neighbour", "coworker", "cousin", "best friend", "flatmate", "old classmate"]

PETS = [("beagle", "dog"), ("border collie", "dog"), ("greyhound", "dog"), ("tabby", "cat"),
        ("Maine Coon", "cat"), ("lop-eared rabbit", "rabbit"), ("cockatiel", "bird")]
PET_NAMES = ["Biscuit", "Juniper", "Pepper", "Moss", "Tofu", "Captain", "Olive", "Pickle", "Mango", "Noodle"]
JOBS = [("ferry mechanic", "the harbour"), ("school librarian", "a primary school"), ("sound engineer", "a radio station"),
        ("hospital pharmacist", "the general hospital"), ("bakery manager", "a family bakery"),
        ("museum archivist", "the city museum"), ("park ranger", "the national park"), ("tram driver", "the transit company"),
        ("data analyst", "an insurance firm"), ("carpenter", "a boatyard")]
CITIES = ["Lisbon", "Tallinn", "Montreal", "Osaka", "Valparaiso", "Ghent", "Leipzig", "Bergen", "Porto", "Gdansk",
          "Aarhus", "Bologna"]
REASONS = ["a new job", "a partner", "cheaper rent", "a university place", "the climate"]
VENUES = ["a lighthouse", "a vineyard", "a mountain hut", "a castle", "the old town hall", "a beach club"]
HOBBIES = [("signed up for pottery classes", "making ceramics"), ("joined a rowing club", "rowing"),
           ("started learning the cello", "playing the cello"), ("took up bouldering at a climbing gym", "climbing"),
           ("began a watercolour course", "painting"), ("joined a community choir", "singing"),
           ("started woodcarving in the shed", "carving"), ("joined a chess club", "chess")]
TRIPS = ["Iceland", "the Dolomites", "Crete", "Hokkaido", "Patagonia", "the Faroe Islands", "Morocco", "Sicily",
         "Lapland", "the Azores"]
TRIP_DOING = ["saw the northern lights", "hiked every day", "ate far too much", "got badly sunburnt", "rented a small boat"]
BANDS = ["a jazz quartet", "a folk duo", "a heavy metal band", "an opera company", "a techno DJ", "a bluegrass band"]
BAND_PLACES = ["an old church", "a festival field", "a tiny bar", "the stadium"]
BUYS = [("a second-hand camper van", "vehicle"), ("an electric scooter", "vehicle"), ("a cargo bike", "vehicle"),
        ("a vintage record player", "gadget"), ("a sailing dinghy", "boat"), ("a secondhand piano", "instrument")]
LAKES = ["Lake Orta", "a glacier lake", "a quiet forest lake", "Lake Bled", "a reservoir in the hills"]
ANIMALS = ["a moose", "a fox", "a pair of deer", "an owl", "a wild boar"]
COMPANIONS = ["two cousins", "old school friends", "a hiking group", "their kids"]
HUBS = ["{n} has been working on a {x} project recently.", "{n} has been really busy lately with {x}.",
        "{n} enjoys spending time with friends and family, especially {y}.", "{n} is trying to find more balance between {x} and rest.",
        "{n} feels excited about what is coming next {y}.", "{n} has been thinking a lot about the future {y}.",
        "{n} said things have been going well overall, {y}.", "{n} wants to make more time for {x}."]
HUB_X = ["new", "big", "personal", "side", "creative", "group", "school", "work", "long", "secret"]
HUB_Y = ["at weekends", "this season", "after a hard winter", "these days", "with everything going on",
         "since the summer", "now that work is calmer", "on quiet evenings"]
COLOURS = ["yellow", "sage green", "white", "terracotta"]


# Everyday life, the bulk of what a person tells over a year (real conversations hold a few hundred observations
# a speaker, most of them about nothing any question asks): a grammar with enough parts that two people rarely
# say the same sentence, so the other people's facts that grow a person to 1,000 memories are mostly unrelated
# chatter, as in real conversations, and only a few recur on a question's topic. None names a topic a question
# asks about (pets, jobs, moves, siblings, new hobbies, trips, concerts, purchases, dishes, the inference facts).
LIFE = [
    ("{n} {v} {o} {t}", {
        "v": ["cooked", "burnt", "shared", "froze", "planned", "improvised"],
        "o": ["a big pot of chilli", "a tray of roast vegetables", "a pumpkin soup", "a batch of flatbreads",
              "a fish pie", "a bean stew", "an omelette with leftovers", "a curry from scratch", "a chickpea salad"]}),
    ("{n} {v} a {g} called {title} {t}", {
        "v": ["finished", "started", "gave up on", "recommended", "reread", "argued about"],
        "g": ["novel", "podcast", "TV series", "graphic novel", "memoir", "crime series", "audiobook"],
        "title": ["The Salt Road", "Night Ferry", "Glass Orchard", "Small Hours", "The Long Field", "Paper Moons",
                  "Iron Lake", "The Quiet Coast", "Seven Bridges", "Blue Hour", "North of Nowhere", "Copper Sky"]}),
    ("{n} {v} {who} {t}", {
        "v": ["helped", "had coffee with", "argued with", "visited", "phoned", "wrote a long letter to", "met up with"],
        "who": ["a colleague from the old team", "an aunt in the countryside", "a neighbour from downstairs",
                "a friend from university", "the landlord", "a retired teacher", "a nephew", "a godchild",
                "an old football coach", "a friend who just had a baby", "a grandmother in a care home"]}),
    ("{n} {v} about {topic} {t}", {
        "v": ["worried", "read an article", "had a debate", "listened to a lecture", "complained", "kept thinking"],
        "topic": ["rising energy bills", "the council's parking plans", "a noisy building site", "sleep and screens",
                  "the price of bread", "a friend's health", "a leaking roof", "the local election", "tax forms",
                  "an upcoming dentist visit", "mould in the bathroom", "a delayed pension payment"]}),
    ("{n} {v} the {thing} {t}", {
        "v": ["fixed", "cleaned", "reorganised", "measured", "sorted out", "finally emptied"],
        "thing": ["garage", "fridge", "bookshelf", "shoe rack", "kitchen drawers", "wardrobe", "cellar",
                  "window boxes", "gutter", "bike shed", "desk", "linen cupboard"]}),
    ("{n} {v} {event} {t}", {
        "v": ["went to", "helped organise", "skipped", "was late for", "enjoyed", "left early from"],
        "event": ["a neighbour's birthday barbecue", "a street flea market", "a pub quiz", "a school fete",
                  "a retirement dinner", "a board game night", "a book launch", "a charity fun run",
                  "a cheese tasting", "a film screening in the park", "a poetry evening", "a garden open day"]}),
    ("{n} {v} {plant} {t}", {
        "v": ["planted", "repotted", "pruned", "harvested", "rescued", "gave away"],
        "plant": ["tomatoes", "a lemon tree", "basil", "sunflowers", "a fern", "strawberries", "runner beans",
                  "a cactus", "lavender", "a fig tree", "chillies", "tulip bulbs"]}),
    ("{n} feels {feel} about {topic} {t}", {
        "feel": ["nervous", "hopeful", "annoyed", "relieved", "unsure", "proud"],
        "topic": ["a performance review", "a friend's visit", "the winter ahead", "a tax refund",
                  "a tricky conversation", "an exam for a certificate", "a neighbour's dispute", "a doctor's letter",
                  "a small promotion", "an overdue library fine", "a new routine", "the long commute"]}),
    ("{n} spent the {when} {doing} {t}", {
        "when": ["evening", "afternoon", "morning", "whole day", "bank holiday"],
        "doing": ["sorting old photos", "writing emails", "baking bread", "doing a jigsaw", "at the laundrette",
                  "waiting for a plumber", "filling in forms", "walking along the canal", "at the allotment",
                  "making a photo album", "ironing", "repainting a chair"]}),
    ("{n} {v} {thing} {t}", {
        "v": ["borrowed", "broke", "returned", "misplaced", "wrapped", "cleaned"],
        "thing": ["a neighbour's ladder", "the car keys", "a friend's camera", "a set of wine glasses",
                  "a heavy toolbox", "a rented projector", "the spare key", "a picnic basket", "a sewing machine",
                  "a stack of plates", "a folding table", "a borrowed umbrella"]}),
    ("{n} {v} {thing} for {who} {t}", {
        "v": ["knitted", "drew", "framed", "printed", "wrote", "made"],
        "thing": ["a birthday card", "a scarf", "a family tree", "a small painting", "a recipe booklet",
                  "a playlist", "a poem", "a photo calendar"],
        "who": ["a niece", "a colleague", "the neighbours", "an old friend", "a cousin", "a godson"]}),
    ("{n} said the {place} {state} {t}", {
        "place": ["bakery on the corner", "local library", "swimming pool", "cinema", "post office",
                  "corner shop", "bus route", "market hall", "farmers' market", "dentist's practice"],
        "state": ["has new opening hours", "is closing down", "got much busier", "has friendly new staff",
                  "raised its prices", "is being renovated"]}),
]
LIFE_TAILS = ["last week.", "at the weekend.", "with a friend.", "after a long day.", "and enjoyed it.",
              "and regretted it.", "on a whim.", "again.", "for the first time in ages.", "before breakfast.",
              "late at night.", "with the radio on.", "while it rained.", "and laughed about it."]


def life_fact(r: random.Random, n: str) -> str:
    template, parts = r.choice(LIFE)
    return template.format(n=n, t=r.choice(LIFE_TAILS), **{k: r.choice(v) for k, v in parts.items()})


def locomo_date(t: datetime) -> str:
    hour = t.strftime("%I").lstrip("0")
    return f"{hour}:{t:%M} {t:%p}".lower() + f" on {t.day} {t:%B}, {t.year}"


def spoken(fact: str, name: str) -> str:
    """A rough first-person turn for the conversation (the benchmark reads the observations)."""
    return (fact.replace(f"{name}'s", "my").replace(f"{name} has", "I have").replace(f"{name} is", "I am")
            .replace(name, "I"))


class Person:
    def __init__(self, name: str, female: bool) -> None:
        self.name = name
        self.she, self.her, self.hers = ("she", "her", "her") if female else ("he", "him", "his")
        self.facts: list[tuple[int, str]] = []  # (session, text)
        self.questions: list[dict] = []


EPISODES = [  # (question word, two facts of one session without it, the question)
    ("camping", "{n} spent a long weekend at {place} with {comp}.", "{n} slept in a tent and saw {animal} at dawn.",
     "When did {n} go camping?", ["Lake Orta", "a glacier lake", "a quiet forest lake", "a reservoir in the hills"]),
    ("skiing", "{n} spent a week in {place} with {comp}.", "{n} finally got down a black run without falling.",
     "When did {n} go skiing?", ["Chamonix", "the Tatra mountains", "a small Alpine village", "Niseko"]),
    ("sailing", "{n} crewed on a friend's yacht along {place}.", "{n} was seasick for the first two days at sea.",
     "When did {n} go on a sailing trip?", ["the Dalmatian coast", "the Swedish archipelago", "the Cornish coast"]),
    ("volunteering", "{n} spent Saturday sorting donations at {place}.", "{n} handed out hot meals to families with {comp}.",
     "When did {n} do some charity work?", ["the food bank", "a church hall", "the community centre"]),
    ("hospital", "{n} had knee surgery at {place}.", "{n} spent three nights on a ward and hated the food.",
     "When was {n} in hospital?", ["the general hospital", "a private clinic", "the university clinic"]),
]
INFERENCE = [
    ("{n} found out {she} is allergic to shellfish after a wedding buffet.", "Would {n} enjoy a prawn cocktail?", "no"),
    ("{n} has been raising two kids alone since the divorce.", "Is {n} in a relationship at the moment?", "no"),
    ("{n} has been terrified of deep water since childhood.", "Would {n} like a snorkelling trip?", "no"),
    ("{n} went vegetarian after watching a documentary.", "Would {n} order the steak at a grill house?", "no"),
    ("{n} broke {her} leg in a cycling accident and is on crutches.", "Could {n} join a ski weekend right now?", "no"),
    ("{n} reads three novels a month and runs a book club.", "Would a bookshop voucher make a good gift for {n}?", "yes"),
    ("{n} gets panicky in crowded places since a festival crush.", "Would {n} enjoy a packed New Year's Eve street party?", "no"),
    ("{n} has been sober for two years and goes to meetings.", "Should {n} be offered a glass of champagne?", "no"),
    ("{n} is saving every penny for a deposit on a flat.", "Is {n} likely to book a luxury cruise soon?", "no"),
    ("{n} grew up on a dairy farm and still milks cows at {her} uncle's.", "Does {n} know much about looking after cattle?", "yes"),
]
# Two of a person's inference facts that together answer one question (keys: INFERENCE indices, lower
# first). Real inference questions often need two facts ("would she ...": a fear and a diet). One of these
# replaces the two one-fact questions of its facts, so the kind holds questions of one and of two facts, as
# real ones do, without growing in count, and neither fact is reachable through an easier question.
INFERENCE_PAIRS = {
    (0, 2): ("Would {n} enjoy a day on a fishing boat, eating the catch on board?", "no"),
    (0, 3): ("What should be left off the menu when {n} comes to dinner?", "meat and shellfish"),
    (0, 6): ("Would {n} have a good time at a packed seafood festival?", "no"),
    (0, 7): ("Would a seafood platter with a bottle of wine make a good birthday treat for {n}?", "no"),
    (1, 8): ("Is there a partner's income helping {n} put money aside for a home?", "no"),
    (2, 4): ("Is {n} up for a kayaking trip with the group?", "no"),
    (2, 6): ("Would {n} like a crowded party on a boat?", "no"),
    (3, 7): ("What should the host skip when {n} comes to the barbecue?", "meat and alcohol"),
    (3, 9): ("Would {n} still eat the beef raised by relatives?", "no"),
    (4, 6): ("Would {n} manage well in the crush at a stadium concert?", "no"),
    (4, 9): ("Could {n} lend a hand with the cows during calving?", "not while on crutches"),
    (5, 8): ("Would {n} prefer a cheap secondhand read to a pricey gadget as a present?", "yes"),
    (6, 7): ("Would {n} enjoy a night at a crowded beer festival?", "no"),
    (7, 8): ("Is {n} likely to spend a lot on nights out at bars?", "no"),
}
INFERENCE_TAILS = [".", ", and talks about it openly.", ", which few people know.", ", as " + "they told a friend.",
                   ", said with a shrug.", ", and takes it seriously.", ", mentioned over dinner.", ", since last spring."]
FILLER_TAILS = [".", " last weekend.", " with a friend.", " after work.", " on a rainy day.", " again after years.",
                " and posted about it.", " without telling anyone.", " on a Sunday morning.", " during a long lunch."]
FILLER_PARTS = [
    ("{n} repaired {x} for a neighbour.", ["an old radio", "a wobbly chair", "a bicycle wheel", "a garden gate"]),
    ("{n} baked {x} for a colleague's leaving party.", ["a lemon tart", "forty cupcakes", "a rye loaf", "a plum cake"]),
    ("{n} is redecorating the {x}.", ["hallway", "bathroom", "spare bedroom", "balcony"]),
    ("{n} got stuck for hours {x}.", ["at a train station", "in an airport", "in a traffic jam", "in a lift"]),
    ("{n} lent {x} to a friend and never got it back.", ["a tent", "a drill", "a suitcase", "a board game"]),
    ("{n} found {x} in the attic.", ["old love letters", "a box of vinyl", "a grandparent's medals", "a childhood diary"]),
    ("{n} took a first-aid course at {x}.", ["work", "the fire station", "the Red Cross"]),
    ("{n} sold {x} online.", ["an old sofa", "a guitar amp", "a pile of comics", "a rowing machine"]),
    ("{n} had a long chat with {x}.", ["an old teacher", "a former boss", "a childhood friend", "a stranger on a train"]),
    ("{n} tried {x} for the first time.", ["oysters", "karaoke", "paddle boarding", "a silent retreat", "archery"]),
    ("{n} watched a documentary about {x}.", ["volcanoes", "octopuses", "the moon landings", "medieval castles"]),
    ("{n} lost {x} on the bus.", ["an umbrella", "a glove", "a library book", "a scarf"]),
    ("{n} keeps {x}.", ["a journal every evening", "bees on the roof", "sourdough starter alive", "a list of films to see"]),
    ("{n} drinks {x} every morning.", ["two coffees", "green tea", "a smoothie", "hot water with lemon"]),
    ("{n} prefers {x}.", ["trains to planes", "winter to summer", "mountains to beaches", "cats to dogs"]),
    ("{n} painted the kitchen {x}.", ["yellow", "sage green", "white", "terracotta"]),
    ("{n} is learning to {x}.", ["juggle", "touch-type", "knit socks", "solve a Rubik's cube"]),
    ("{n} ran into {x} at the supermarket.", ["an ex", "a former flatmate", "a famous actor", "a primary school teacher"]),
]


def build_person(r: random.Random, p: Person, sessions: int, dates: list[datetime], now: datetime) -> None:
    """Plan one person's facts and questions; ``fact`` returns a fact's index (its dia id is given later).

    Each person lives a random part of the catalogue, in one of several wordings, so a topic recurs for a
    few other people (whose facts, renamed, are the benchmark's distractors) rather than for everyone.
    """
    n, she, her = p.name, p.she, p.hers
    self_ = "herself" if she == "she" else "himself"

    def fact(session: int, text: str) -> int:
        p.facts.append((session, text))
        return len(p.facts) - 1

    def ask(question: str, evidence: list[int], category: int, answer: str = "", tags: tuple[str, ...] = ()) -> None:
        p.questions.append({"question": question, "answer": answer, "evidence": evidence, "category": category,
                            "tags": list(tags)})

    def session(lo: int = 1, hi: int | None = None) -> int:
        hi = hi or sessions
        return r.randint(min(lo, hi), hi)

    def lives(share: float = 0.55) -> bool:
        return r.random() < share

    others = r.sample(OTHERS, 6)  # the people around them: a few recur across people, most do not
    # --- pet (paraphrase: the breed is never named in the question) + a neighbour's pet as the distractor
    if lives():
        (breed, kind), pet = r.choice(PETS), r.choice(PET_NAMES)
        i = fact(session(1, sessions - 3), r.choice([
            f"{n} adopted a {breed} named {pet} from the animal shelter.",
            f"{n} brought home a young {breed} and called it {pet}.",
            f"{n} now shares the flat with {pet}, a {breed} from a rescue centre."]))
        d_breed = r.choice([b for b, k in PETS if k == kind and b != breed] or [breed])
        fact(session(), f"{n}'s {r.choice(RELATIONS)} {others[0]} got a {d_breed} called {r.choice(PET_NAMES)}.")
        style = r.random()
        if style < 0.35:
            ask(f"What is my {kind} called?", [i], 4, pet, ("first-person",))
        elif style < 0.5:
            ask(f"¿Cómo se llama la mascota de {n}?", [i], 4, pet, ("es",))
        else:
            ask(f"What did {n} name the {kind} {she} took in?", [i], 4, pet)
    # --- job, superseded: "what now" (single) and "what changed" (both)
    if lives(0.6):
        (job1, at1), (job2, at2) = r.sample(JOBS, 2)
        s1 = session(1, sessions // 2)
        s2 = session(s1 + 2, sessions)
        j1 = fact(s1, r.choice([f"{n} works as a {job1} at {at1}.", f"{n} has a job as a {job1} at {at1}.",
                                f"{n} earns a living as a {job1} at {at1}."]))
        j2 = fact(s2, r.choice([f"{n} quit the job at {at1} and now works as a {job2} at {at2}.",
                                f"{n} left {at1}; {she} started as a {job2} at {at2}.",
                                f"{n} changed careers and is a {job2} at {at2} now."]))
        fact(session(), f"{n}'s {r.choice(RELATIONS)} {others[1]} works as a {r.choice(JOBS)[0]} too.")
        if r.random() < 0.25:
            ask(f"Was arbeitet {n} jetzt beruflich?", [j2], 4, job2, ("de",))
        else:
            ask(f"What does {n} do for a living these days?", [j2], 4, job2)
        ask(f"How has {n}'s career changed since we first talked?", [j1, j2], 6, f"{job1} -> {job2}")
    # --- city, superseded: "where before" (what changed) and "where now" (single)
    if lives(0.5):
        c1, c2 = r.sample(CITIES, 2)
        s1 = session(1, sessions // 2)
        s2 = session(s1 + 1, sessions)
        k1 = fact(s1, r.choice([f"{n} has an apartment in {c1}.", f"{n} rents a small place in {c1}.",
                                f"{n} lives in {c1}, near the old port."]))
        k2 = fact(s2, r.choice([f"{n} relocated to {c2} because of {r.choice(REASONS)}.",
                                f"{n} packed up and moved to {c2} for {r.choice(REASONS)}."]))
        ask(f"In which town is {n} settled now?", [k2], 4, c2)
        if r.random() < 0.4:
            ask("Where was I living before I moved?", [k1, k2], 6, c1, ("first-person",))
        else:
            ask(f"Which city was {n} based in before the move?", [k1, k2], 6, c1)
    # --- sibling bridge: the name in one session, the wedding in another; a cousin's wedding distracts
    if lives(0.5):
        rel = r.choice(["younger sister", "older sister", "little brother", "big brother"])
        sis = r.choice(SIBLINGS)
        venue, venue2 = r.sample(VENUES, 2)
        s1 = session(1, sessions // 2)
        b1 = fact(s1, r.choice([f"{n}'s {rel} is called {sis}.", f"{n} has a {rel}, {sis}, who is a nurse.",
                                f"{n} talked about {her} {rel} {sis} a lot."]))
        b2 = fact(session(s1 + 1, sessions), r.choice([
            f"{sis} is getting married at {venue} next spring.", f"{sis}'s wedding will be held at {venue}.",
            f"{sis} and {r.choice(OTHERS[14:])} will tie the knot at {venue}."]))
        fact(session(), f"{n}'s cousin {others[2]} got married at {venue2}.")
        ask(f"Where is {n}'s sibling having the wedding?", [b1, b2], 1, venue)
        ask(f"What is the name of {n}'s sibling?", [b1], 4, sis)
    # --- hobbies over the year: two or three facts, different sessions; asked without any of their words
    if lives(0.5):
        k = r.choice([2, 3])
        picks = r.sample(HOBBIES, k)
        hob = [fact(s, f"{n} {h[0]}.") for s, h in zip(r.sample(range(1, sessions + 1), k), picks)]
        if r.random() < 0.3:
            ask("What new pastimes have I picked up?", hob, 1, ", ".join(h[1] for h in picks), ("first-person",))
        else:
            ask(f"What leisure activities has {n} taken up over time?", hob, 1, ", ".join(h[1] for h in picks))
    # --- an episode: two facts of one session, neither has the question's word; a relative's one distracts
    if lives(0.7):
        word, f1, f2, question, places = r.choice(EPISODES)
        s = session(2, sessions)
        e1 = fact(s, f1.format(n=n, place=r.choice(places), comp=r.choice(COMPANIONS)))
        e2 = fact(s, f2.format(n=n, animal=r.choice(ANIMALS), comp=r.choice(COMPANIONS)))
        fact(session(), f"{n}'s {r.choice(RELATIONS)} {others[3]} went {word} recently.")
        if r.random() < 0.35:
            ask(question.replace("did {n}", "did I").replace("was {n}", "was I"), [e1, e2], 2,
                locomo_date(dates[s - 1]), ("first-person",))
        else:
            ask(question.format(n=n), [e1, e2], 2, locomo_date(dates[s - 1]))
    # --- trips: three, one asked by its month
    if lives(0.5):
        t_sessions = r.sample(range(1, sessions + 1), 3)
        trips = r.sample(TRIPS, 3)
        t_ids = [fact(s, r.choice([f"{n} went on holiday to {t} and {r.choice(TRIP_DOING)}.",
                                   f"{n} spent ten days in {t}.", f"{n} is back from {t}, where {she} {r.choice(TRIP_DOING)}."]))
                 for s, t in zip(t_sessions, trips)]
        pick = r.randrange(3)
        month = dates[t_sessions[pick] - 1]
        if len({dates[s - 1].strftime('%Y-%m') for s in t_sessions}) == 3:
            ask(f"Where did {n} travel in {month:%B %Y}?", [t_ids[pick]], 2, trips[pick])
    # --- concerts: one last year, one this year (relative to "now")
    last_year = [s for s in range(1, sessions + 1) if dates[s - 1].year == now.year - 1]
    this_year = [s for s in range(1, sessions + 1) if dates[s - 1].year == now.year]
    if last_year and this_year and lives(0.5):
        (b_old, b_new), place = r.sample(BANDS, 2), r.choice(BAND_PLACES)
        o = fact(r.choice(last_year), f"{n} saw {b_old} play live at {place}.")
        fact(r.choice(this_year), f"{n} saw {b_new} play live at {r.choice(BAND_PLACES)}.")
        ask(f"Which band did {n} go to see last year?", [o], 2, b_old)
    # --- purchases: one last month, one long ago
    recent = [s for s in range(1, sessions + 1) if 0 < (now - dates[s - 1]).days <= 45]
    early = [s for s in range(1, sessions + 1) if (now - dates[s - 1]).days > 120]
    if recent and early and lives(0.5):
        (buy1, _), (buy2, _) = r.sample(BUYS, 2)
        fact(r.choice(early), f"{n} bought {buy1}.")
        x = fact(r.choice(recent), r.choice([f"{n} bought {buy2}.", f"{n} treated {self_} to {buy2}."]))
        ask(f"What did {n} purchase last month?", [x], 2, buy2)
    # --- inference: no word in common with the evidence; two of the facts answer one question when they can
    asked: list[tuple[int, int, str, str, bool]] = []  # (INFERENCE index, fact, question, answer, first person)
    for item in r.sample(INFERENCE, 3):
        text, q, a = item
        e = fact(session(), text.format(n=n, she=she, her=her).rstrip(".") + r.choice(INFERENCE_TAILS))
        asked.append((INFERENCE.index(item), e, q, a, r.random() < 0.15))
    pair = next(((x, y) for x, y in combinations(sorted(asked), 2) if (x[0], y[0]) in INFERENCE_PAIRS), None)
    if pair is not None:
        q, a = INFERENCE_PAIRS[(pair[0][0], pair[1][0])]
        ask(q.format(n=n, she=she, her=her), [pair[0][1], pair[1][1]], 3, a, ("two facts",))
    for k, e, q, a, first_person in asked:
        if pair is not None and k in (pair[0][0], pair[1][0]):
            continue
        if first_person:
            ask(q.format(n=n).replace(f"for {n}?", "for me?").replace(f"{n} ", "I ").replace("Is I", "Am I")
                .replace("Does I", "Do I"),
                [e], 3, a, ("first-person",))
        else:
            ask(q.format(n=n), [e], 3, a)
    # --- a fact stated once, asked in other words, sometimes in Spanish
    if lives(0.6):
        food = r.choice(["mushroom risotto", "lamb tagine", "pierogi", "shakshuka", "dumplings", "paella", "pho"])
        cook = r.choice(["grandmother", "father", "first flatmate", "aunt"])
        f = fact(session(), r.choice([f"{n}'s favourite dish is {food}, which {her} {cook} used to cook.",
                                      f"{n} could eat {food} every day, like {her} {cook} made it."]))
        if r.random() < 0.3:
            ask(f"¿Cuál es la comida preferida de {n}?", [f], 4, food, ("es",))
        else:
            ask(f"What meal does {n} love most?", [f], 4, food)
    # --- hubs and filler: chosen for many questions, evidence for none
    for h in r.sample(HUBS, 4):
        fact(session(), h.format(n=n, x=r.choice(HUB_X), y=r.choice(HUB_Y)))
    for template, values in r.sample(FILLER_PARTS, 17):
        fact(session(), template.format(n=n, x=r.choice(values)).rstrip(".") + r.choice(FILLER_TAILS))
    said = {text for _s, text in p.facts}
    for _ in range(r.randint(LIFE_FACTS[0], LIFE_FACTS[1])):
        text = life_fact(r, n)
        if text not in said:
            said.add(text)
            fact(session(), text)


def session_dates(r: random.Random, n: int) -> list[datetime]:
    """Sessions spread over about fourteen months across a new year, so "last year" means something."""
    t = datetime(2023, 1, 10) + timedelta(days=r.randrange(0, 60))
    out = []
    for _ in range(n):
        t += timedelta(days=r.randrange(20, 40), hours=r.randrange(0, 10), minutes=r.randrange(0, 60))
        out.append(t)
    return out


def make_sample(r: random.Random, a: tuple[str, bool], b: tuple[str, bool], idx: int, split: str) -> dict:
    sessions = r.randrange(13, 16)
    dates = session_dates(r, sessions)
    now = dates[-1] + timedelta(days=1)
    people = [Person(*a), Person(*b)]
    for p in people:
        build_person(r, p, sessions, dates, now)
    conversation: dict = {"speaker_a": people[0].name, "speaker_b": people[1].name}
    observation: dict = {}
    dia: dict[tuple[str, int], str] = {}
    for s in range(1, sessions + 1):
        here = [(p, i, text) for p in people for i, (fs, text) in enumerate(p.facts) if fs == s]
        r.shuffle(here)
        turns, obs = [], {p.name: [] for p in people}
        for p, i, text in here:
            d = f"D{s}:{len(turns) + 1}"
            dia[(p.name, i)] = d
            turns.append({"speaker": p.name, "dia_id": d, "text": spoken(text, p.name)})
            obs[p.name].append([text, d])
        conversation[f"session_{s}"] = turns
        conversation[f"session_{s}_date_time"] = locomo_date(dates[s - 1])
        observation[f"session_{s}_observation"] = obs
    qa = []
    for p in people:
        for q in p.questions:
            qa.append({**q, "evidence": [dia[(p.name, i)] for i in q["evidence"]]})
        qa.append({"question": f"What is the name of {p.name}'s pet dragon?", "answer": "", "evidence": [],
                   "adversarial_answer": "none", "category": 5})
    return {"sample_id": f"hard-{split}-{idx}", "conversation": conversation, "observation": observation, "qa": qa}


def make_split(split: str) -> list[dict]:
    seed, count = SPLITS[split]
    r = random.Random(seed)
    half = 0 if split == "tune" else 1  # disjoint names between the splits
    women = [w for k, w in enumerate(FEMALE) if k % 2 == half]
    men = [m for k, m in enumerate(MALE) if k % 2 == half]
    pool = [(w, True) for w in women] + [(m, False) for m in men]
    r.shuffle(pool)
    return [make_sample(r, pool[2 * i], pool[2 * i + 1], i, split) for i in range(count)]


def main() -> None:
    for split in SPLITS:
        samples = make_split(split)
        out = HERE / f"hard_{split}_locomo.json"
        out.write_text(json.dumps(samples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        facts = sum(len(v) for s in samples for o in s["observation"].values() for v in o.values())
        questions = sum(1 for s in samples for q in s["qa"] if q["category"] != 5)
        print(f"wrote {out} ({len(samples)} conversations, {facts} observations, {questions} questions)")


if __name__ == "__main__":
    main()
