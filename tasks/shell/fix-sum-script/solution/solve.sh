#!/bin/bash
sed -i 's/totl + n/total + n/' sum.sh
